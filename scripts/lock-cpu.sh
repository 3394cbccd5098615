#!/usr/bin/env bash
# Re-resolve trainer_image/requirements-cpu.lock: the CPU image's hashed lock, for its base's
# Python (Debian bookworm's python3.11) and torch's CPU wheel.
#
#   scripts/lock-cpu.sh [WHEEL_DIR]     WHEEL_DIR holds torch-<ver>+cpu-cp311-...whl (default: /opt/wheels)
#
# pip resolves (dry run, nothing installed) the trainer's dependencies from PyPI for CPython 3.11 on
# manylinux x86_64, with torch taken from WHEEL_DIR (download.pytorch.org/whl/cpu serves the same
# file elsewhere), and writes one exact pin and the sha256 of the file it chose per package.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-/opt/wheels}
PY=${PYTHON:-.venv/bin/python}
OUT=trainer_image/requirements-cpu.lock
torch=$("$PY" -c 'import tomllib; d = tomllib.load(open("trainer_image/pyproject.toml", "rb"))["project"]["dependencies"]; print(next(x for x in d if x.startswith("torch==")).split("==")[1])')
mapfile -t deps < <("$PY" -c 'import tomllib; d = tomllib.load(open("trainer_image/pyproject.toml", "rb"))["project"]["dependencies"]; print("\n".join(x for x in d if not x.startswith("torch")))')
plats=(--platform manylinux2014_x86_64)
for v in $(seq 17 36); do plats+=(--platform "manylinux_2_${v}_x86_64"); done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip --isolated install --dry-run --ignore-installed --quiet --report "$tmp/report.json" \
  --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" --index-url https://pypi.org/simple \
  --find-links "$WHEELS" --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  "${plats[@]}" --target "$tmp/t" "torch==${torch}+cpu" "${deps[@]}"
"$PY" - "$tmp/report.json" "$OUT" <<'PY'
import json
import re
import sys

report, out = sys.argv[1], sys.argv[2]
rows = []
for item in json.load(open(report))["install"]:
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
    rows.append(f"{name}=={item['metadata']['version']} \\\n    --hash=sha256:{sha}\n")
head = (
    "# The CPU flavor's lock (Debian bookworm python3.11, torch's CPU wheel); written by scripts/lock-cpu.sh:\n"
    "#    pip install --dry-run --report --only-binary=:all: --python-version 3.11 --python-platform x86_64-manylinux"
    " (--platform manylinux_2_17..36_x86_64) torch==<ver>+cpu <trainer_image/pyproject.toml dependencies>\n"
)
open(out, "w").write(head + "".join(sorted(rows)))
print(f"wrote {out} ({len(rows)} pins)")
PY
