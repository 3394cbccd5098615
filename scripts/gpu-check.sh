#!/usr/bin/env bash
# The GPU tests (tests/gpu, marker `gpu`) on a machine with CUDA and torch installed, without network:
# installs the trainer from this working tree with no dependencies (the machine's torch stays), says
# what the trainer needs that is missing, what `deterministic: auto` resolves to and whether `compile: true`
# compiles (issue 40), then runs `pytest -m gpu tests/gpu` (which has tests of both).
#
#   scripts/gpu-check.sh [--wheels DIR] [PYTEST ARGS...]
#
# --wheels DIR: install these wheels first, offline (what the machine lacks: orjson; hatchling,
# trove-classifiers and tomlkit to build the editable install without network). docs/gpu.md has the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [[ ${1:-} == --wheels ]]; then
  "$py" -m pip install -q --no-index --no-deps "$2"/*.whl
  shift 2
fi
"$py" -m pip install -q --no-index --no-deps --no-build-isolation -e ./trainer_image
"$py" - <<'PY'
import importlib.util, sys
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-'}, "
      f"{torch.cuda.device_count()} GPU(s): {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}")
if torch.__version__.split("+")[0] != "2.13.0":
    print(f"note: the trainer pins torch==2.13.0 (trainer_image/pyproject.toml); running it on torch {torch.__version__}")
missing = [m for m in ("orjson", "yaml", "numpy", "tensorboard", "tqdm", "sklearn") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"the trainer needs {', '.join(missing)}: pass --wheels DIR with their wheels")
# issue 40: what `deterministic: auto` resolves to here, and whether `compile: true` can compile (inductor, Triton)
import time
from trainer.checkpoint.rng import deterministic_mode
print(f"deterministic: auto -> {deterministic_mode('auto', torch.cuda.is_available())[1]}")
if torch.cuda.is_available():
    from trainer.training.compiled import compile_model
    started = time.monotonic()
    try:
        model = compile_model(torch.nn.Linear(64, 64).cuda())
        model(torch.randn(8, 64, device="cuda")).sum().backward()
        torch.cuda.synchronize()
    except Exception as exc:  # the compile tests would fail the same way: say why once, up front
        print(f"compile: true cannot compile here: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    else:
        print(f"compile: true compiles here (a Linear forward + backward in {time.monotonic() - started:.1f} s)")
PY
exec "$py" -m pytest -m gpu --confcutdir tests/gpu -p no:cacheprovider tests/gpu "$@"
