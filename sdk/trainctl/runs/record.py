"""The base of every part of a run record (`Record`), and the part that says what ran (`Provenance`).

Apart from runs/state.py, which holds the rest of the record, because a render writes the provenance into the
artifact (runs/provenance.py): `trainctl render` and `validate` build this one record part, not the whole run
record with its states, attempts and handles (docs/benchmarks.md section 4).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class Record(BaseModel):
    """A part of a run record: typed, frozen (changed by copying), unknown keys of a newer trainctl ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


class Provenance(Record):
    """What ran (runs/provenance.py): two runs with the same three hashes ran the same thing."""

    image: str
    image_digest: str | None = None
    code_sha256: str | None = None
    spec_sha256: str
    trainctl_version: str
    function: dict[str, Any] | None = Field(
        None, description="A function job's name, payload sha256, modules, versions."
    )

    @model_serializer(mode="wrap")
    def _without_empty_function(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Other jobs' provenance keeps its shape and bytes (artifacts, summary.json, the run store)."""
        data: dict[str, Any] = handler(self)
        if data.get("function") is None:
            data.pop("function", None)
        return data
