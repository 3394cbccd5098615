"""What a local run records to be found again: its runner's pid and, with `local.container`, its container."""

from __future__ import annotations

from ...runs.state import Record, TargetHandle


class LocalContainer(Record):
    """The container a `local.container` run runs in (container_runtime.create)."""

    runtime: str
    name: str
    image: str
    image_id: str = ""


class LocalHandle(TargetHandle):
    """The runner process (`python -m trainctl.targets.local.supervisor`) and the run's container, if any; its
    folder is the record's `paths.run_dir`."""

    pid: int | None = None
    container: LocalContainer | None = None

    @classmethod
    def from_meta(cls, meta: dict[str, object]) -> LocalHandle:
        """An old run-store row's meta (before typed records): the container's facts were `container_<key>`."""
        box = {k.removeprefix("container_"): v for k, v in meta.items() if k.startswith("container_")}
        return cls.model_validate({"pid": meta.get("pid"), "container": box or None})
