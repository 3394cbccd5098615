"""The job's `code:` section, and the bundle packed from it (pure data).

`code: ./src` is short for `code: {dir: ./src}`. Packing happens above the spec, in an explicit step
before render and submit (trainctl.submit.bundle.prepare), which hands the job a `Prepared`; render reads only
that (the bundle's sha256, files and size), so it does no I/O.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from .section import Section


class Code(Section):
    """Your code folder, packed into a deterministic bundle and unpacked where the job runs."""

    dir: str = Field(..., description="The folder to ship; relative paths are from the job file's folder.")
    exclude: list[str] = Field(
        default_factory=list, description="gitignore-style patterns left out (besides .git and .gitignore's)."
    )
    include: list[str] = Field(
        default_factory=list,
        description="gitignore-style patterns of secret-looking files (.env, *.pem...) you do mean to ship.",
    )
    requirements: str | None = Field(
        None, description="A requirements file inside dir, installed into a venv layered over the image's."
    )

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return {"dir": value} if isinstance(value, str) else value

    @field_validator("dir")
    @classmethod
    def _dir_nonempty(cls, value: str) -> str:
        if not value.strip() or "://" in value:
            raise ValueError("expected a local folder path such as ./src")
        return value

    @field_validator("requirements")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        if value is not None:
            norm = posixpath.normpath(value)
            if posixpath.isabs(norm) or norm.startswith(".."):
                raise ValueError("expected a path inside code.dir, such as requirements.txt")
            return norm
        return value


@dataclass(frozen=True)
class Bundle:
    """The packed folder: its bytes, their sha256, and what went in (path, size), sorted."""

    data: bytes
    sha256: str
    files: tuple[tuple[str, int], ...]
    source: Path | str
    requirements: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Prepared:
    """What the explicit bundle step found for a job's code: the bundle, or (None) that the folder was not
    there. It holds the `code` and job folder it was made from, so a changed job is never rendered with it."""

    code: Code | None
    base_dir: Path | None
    folder: Path | None
    bundle: Bundle | None
    function_sha256: str | None = None
    """A function job's payload (Job.with_function), packed into the bundle beside the folder's files."""

    def fits(self, code: Code | None, base_dir: Path | None, function: Any) -> bool:
        """Made from this job's `code:`, job folder and function (a changed job is never rendered with it)."""
        sha = getattr(function, "sha256", None)
        return (code is not None or sha is not None) and (self.code, self.base_dir, self.function_sha256) == (
            code, base_dir, sha,
        )  # fmt: skip
