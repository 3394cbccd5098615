"""Atomic, self-checking checkpoints and resume.

Layout: `DIR/step-00000120/{state.pt, meta.json}` (+ `dcp/` shards for FSDP), a `DIR/latest`
pointer, the newest `keep` directories kept. A checkpoint is written under `DIR/.tmp-...`
and renamed into place only when complete; `meta.json`, written last, records each file's size.
Resume takes the newest directory that reads back and whose `state.pt` passes the region CRC-32s
meta.json records (checksums.py: summed by threads beside the write; torch.load checks nothing); a
damaged one is skipped with a warning. DCP shards (`.distcp`, FSDP) carry no checksum: a full-size
corrupted shard is not detected (see docs/trainer.md).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import torch
import torch.distributed as dist

from .. import failpoints, identity
from ..config import TrainConfig, flag_text
from ..errors import CheckpointCorrupt, TrainerInputError
from .checksums import THREADS, RegionCrcWriter, verify_regions, verify_zip, without_zip_crcs
from .rng import rng_state

FORMAT = 1
STEP_DIR = re.compile(r"^step-(\d{8})$")
STATE = "state.pt"
META = "meta.json"
DCP = "dcp"


def step_name(step: int) -> str:
    return f"step-{step:08d}"


# ---------------------------------------------------------------- finding and checking


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(path: Path) -> dict[str, Any]:
    """Metadata of a complete checkpoint; raises CheckpointCorrupt if it is not one."""
    meta_path = path / META
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise CheckpointCorrupt(f"{path}: no {META} (half-written?)") from None
    except (OSError, ValueError) as exc:
        raise CheckpointCorrupt(f"{meta_path}: unreadable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("files"), dict):
        raise CheckpointCorrupt(f"{meta_path}: not a trainer checkpoint (format {FORMAT})")
    for name, size in meta["files"].items():
        file = path / name
        if not file.is_file():
            raise CheckpointCorrupt(f"{path}: missing {name}")
        if file.stat().st_size != size:
            raise CheckpointCorrupt(f"{file}: {file.stat().st_size} bytes, expected {size} (truncated?)")
    return meta


def verify_files(path: Path, meta: dict[str, Any]) -> None:
    """Verify the checkpoint's torch-saved files: against the region CRCs meta.json recorded (checksums.py),
    or, in a checkpoint written before those, against torch's zip CRCs unless it was saved without them."""
    checksums = meta.get("checksums") or {}
    for name in sorted(meta["files"]):
        if name in checksums:
            verify_regions(path / name, checksums[name])
        elif name.endswith(".pt") and meta.get("zip_crc32", True):  # False: set_crc32_options(False) at save time
            verify_zip(path / name)


def load_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path / STATE, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointCorrupt(f"{path / STATE}: cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise CheckpointCorrupt(f"{path / STATE}: not a state dict")
    return state


def candidates(root: Path) -> list[Path]:
    """Step directories under `root`, newest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found, reverse=True)]


PATH_FIELDS = ("train_data", "val_data", "checkpoint_dir", "output_dir", "resume")
"""Config fields a checkpoint does not record: where things are, not how the run trains."""
BREAKING = ("model_args", "optimizer", "strategy")
"""Settings the saved state depends on (besides the model): the weights' shapes, the optimizer's state, DDP
whole tensors vs FSDP shards. A checkpoint cannot continue with another value."""


def settings_of(cfg: TrainConfig) -> dict[str, Any]:
    """The run's settings as a checkpoint records them (`SaveInfo.config`): every config field but paths."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PATH_FIELDS}


def changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each setting that differs from the checkpoint's, as `lr 0.003 -> 0.01` (fields the checkpoint did not
    record are left out: an older checkpoint names none). `batch_size` follows `global_batch_size` when set."""
    out = []
    for key, value in now.items():
        if key in saved and saved[key] != value and not (key == "batch_size" and now.get("global_batch_size")):
            out.append(f"{key} {flag_text(saved[key])} -> {flag_text(value)}")
    return out


def check_compatible(path: Path, meta: dict[str, Any], model: str, settings: dict[str, Any] | None = None) -> None:
    """Refuse a checkpoint of another model, or (given this run's `settings`) one whose saved state needs
    another model_args, optimizer or strategy (`BREAKING`)."""
    if meta.get("model") != model:
        raise TrainerInputError(
            f"checkpoint {path} was written by model {meta.get('model')!r}, but this run trains {model!r}; "
            "use another checkpoint_dir or resume: never"
        )
    if settings is None:
        return
    saved = {"model_args": meta.get("model_args"), "strategy": meta.get("strategy"), **(meta.get("config") or {})}
    broken = changes({k: saved[k] for k in BREAKING if saved.get(k) is not None}, settings)
    if broken:
        raise TrainerInputError(
            f"checkpoint {path} cannot continue with {', '.join(broken)}: its saved weights and optimizer state "
            "need the old value; set it back, or start a new run from scratch"
        )


def select(
    root: Path, resume: str, model: str, settings: dict[str, Any] | None = None
) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from (or None) and warnings about skipped ones.

    Rank 0 only (the caller broadcasts its choice), so only rank 0 reads the files for the CRC check.
    """
    warnings: list[str] = []
    if resume == "never":
        return None, warnings
    if resume != "auto":
        path = Path(resume)
        if (path / META).exists() or STEP_DIR.match(path.name):
            try:
                meta = read_meta(path)
                verify_files(path, meta)
                load_state(path)
            except CheckpointCorrupt as exc:
                raise TrainerInputError(f"resume: {exc}") from None
            check_compatible(path, meta, model, settings)
            return path, warnings
        if not path.is_dir():
            raise TrainerInputError(f"resume: no such checkpoint directory: {path}")
        root = path
    for path in candidates(root):
        try:
            meta = read_meta(path)
            if lineage := identity.check_owner(path, meta, root):  # another run's in this run's folder: refused
                warnings.append(lineage)  # unless --resume-from placed it there
            check_compatible(path, meta, model, settings)
            verify_files(path, meta)
            load_state(path)
            return path, warnings
        except CheckpointCorrupt as exc:
            warnings.append(f"skipping unusable checkpoint: {exc}")
    if resume != "auto":
        raise TrainerInputError(f"resume: {root} holds no complete checkpoint")
    return None, warnings


# ---------------------------------------------------------------- writing


@dataclass
class SaveInfo:
    step: int
    epoch: int
    position: int  # micro-batches of `epoch` already trained on, per rank
    samples: int  # global positions of the epoch's sample order consumed (any world size)
    model: str
    model_args: dict[str, Any]
    world_size: int
    strategy: str
    config: dict[str, Any] = field(default_factory=dict)
    """The run's settings (`settings_of`): a resume names each one that changed since (`changes`)."""
    run_uid: str | None = None
    """The run that wrote it (identity.py): automatic resume continues only its own."""


def _write_complete(tmp: Path, final: Path, meta: dict[str, Any]) -> None:
    meta["files"] = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
    with open(tmp / META, "w") as fh:
        json.dump(meta, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp)
    if failpoints.ACTIVE:
        failpoints.hit("checkpoint-publish")  # complete in .tmp-*, not yet renamed
    if final.exists():  # re-saving the same step after a restart
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(final.parent)
    pointer = final.parent / f".latest.{os.getpid()}"
    pointer.write_text(final.name + "\n")
    os.replace(pointer, final.parent / "latest")


def prune(root: Path, keep: int) -> None:
    for old in candidates(root)[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def clean_stale(root: Path) -> None:
    """Remove what a writer that died mid-checkpoint left (before training starts): `.tmp-*`
    directories, and a `.latest.PID` pointer killed between its write and its rename."""
    if root.is_dir():
        for p in root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
        for p in root.glob(".latest.*"):
            p.unlink(missing_ok=True)


def stage(tree: Any, staged: Any = None) -> Any:
    """A copy of a state tree that shares no memory with the training tensors, into the CPU
    tensors of `staged` (the previous copy) where shapes match: reusing the staging memory makes
    the copy a plain memcpy, not fresh pages to fault in (as torch DCP's async stager does);
    CUDA tensors go to pinned memory."""
    if isinstance(tree, torch.Tensor):
        src = tree.detach()
        if isinstance(staged, torch.Tensor) and staged.shape == src.shape and staged.dtype == src.dtype:
            return staged.copy_(src, non_blocking=src.is_cuda)
        if src.is_cuda:
            return torch.empty_like(src, device="cpu", pin_memory=True).copy_(src, non_blocking=True)
        return src.clone(memory_format=torch.contiguous_format)
    if isinstance(tree, dict):
        old = staged if isinstance(staged, dict) else {}
        return {k: stage(v, old.get(k)) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        old_items = list(staged) if type(staged) is type(tree) and len(staged) == len(tree) else [None] * len(tree)
        return type(tree)(stage(v, o) for v, o in zip(tree, old_items, strict=True))
    return copy.deepcopy(tree)


def snapshot(
    info: SaveInfo,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any],
    rank: int,
    copy_off: bool = True,
    staged: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Collective (DDP): every rank's RNG state to rank 0, and there a copy of the whole state
    off the training tensors, which a background `write` may take its time over. None elsewhere."""
    rngs: list[Any] = [None] * info.world_size
    dist.all_gather_object(rngs, rng_state())
    if rank != 0:
        return None
    state = {**extra, "rng": rngs, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    if not copy_off:
        return state
    copied = cast(dict[str, Any], stage(state, staged))
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the non-blocking device-to-host copies have landed
    return copied


def _tmp_and_final(root: Path, step: int) -> tuple[Path, Path]:
    """(`.tmp-step-N`, `step-N`): where a checkpoint is written, and the name it is published under."""
    return root / f".tmp-{step_name(step)}", root / step_name(step)


def _fresh_tmp(root: Path, step: int) -> tuple[Path, Path]:
    """`_tmp_and_final`, the first emptied (what a writer that died there left goes)."""
    tmp, final = _tmp_and_final(root, step)
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp, final


def _publish(tmp: Path, final: Path, info: SaveInfo, state: dict[str, Any], keep: int) -> Path:
    """Rank 0, no collectives: write `state.pt` into `tmp`, fsync it, verify the written archive
    against its CRCs, then `meta.json` and the atomic rename (`_write_complete`), and prune."""
    with open(tmp / STATE, "wb") as fh, ThreadPoolExecutor(THREADS, thread_name_prefix="checkpoint-crc") as pool:
        summed = RegionCrcWriter(fh, pool)
        with without_zip_crcs():
            torch.save(state, cast(IO[bytes], summed))  # torch.save calls only write() and flush()
        fh.flush()
        os.fsync(fh.fileno())
    meta = {"format": FORMAT, **info.__dict__, "zip_crc32": False, "checksums": {STATE: summed.record()}}
    if failpoints.ACTIVE:
        failpoints.hit("checkpoint-write")  # state.pt written, no meta.json yet
    _write_complete(tmp, final, meta)
    prune(final.parent, keep)
    return final


def write(root: Path, info: SaveInfo, state: dict[str, Any], keep: int) -> Path:
    """Rank 0, no collectives (so it can run in a thread): the whole DDP checkpoint. A writer that
    dies before the rename leaves only a `.tmp-*` directory, which resume never considers."""
    return _publish(*_fresh_tmp(root, info.step), info, state, keep)


def save(
    root: Path,
    info: SaveInfo,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any],
    keep: int,
    rank: int,
) -> Path:
    """Collective: every rank calls it. DDP: rank 0 writes the whole state. FSDP: every rank writes
    its DCP shards of model and optimizer, rank 0 the rest of the state and the metadata."""
    tmp, final = _tmp_and_final(root, info.step)
    if info.strategy != "fsdp":
        state = snapshot(info, model, optimizer, extra, rank, copy_off=False)  # written before training goes on
        if state is not None:
            write(root, info, state, keep)
        dist.barrier()
        return final
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rngs: list[Any] = [None] * info.world_size
    dist.all_gather_object(rngs, rng_state())
    if rank == 0:
        _fresh_tmp(root, info.step)
    dist.barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(tmp / DCP))
    if rank == 0:
        _publish(tmp, final, info, {**extra, "rng": rngs}, keep)
    dist.barrier()
    return final


def load_into(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, strategy: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load weights and optimizer state into this rank's model; returns (meta, rest of state)."""
    meta = read_meta(path)
    state = load_state(path)
    try:
        if strategy == "fsdp":
            if meta.get("strategy") != "fsdp":
                raise TrainerInputError(
                    f"checkpoint {path} was written with strategy {meta.get('strategy')!r}, not fsdp"
                )
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            model_sd, optim_sd = get_state_dict(model, optimizer)
            sharded: dict[str, Any] = {"model": model_sd, "optimizer": optim_sd}
            dcp.load(sharded, checkpoint_id=str(path / DCP))
            set_state_dict(model, optimizer, model_state_dict=sharded["model"], optim_state_dict=sharded["optimizer"])
        else:
            if "model" not in state:
                raise TrainerInputError(f"checkpoint {path} holds sharded (fsdp) weights; set strategy: fsdp")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0:3]
        raise TrainerInputError(
            f"checkpoint {path} does not fit this model "
            f"({meta.get('model')} {meta.get('model_args')}): {' '.join(first)}"
        ) from None
    return meta, state
