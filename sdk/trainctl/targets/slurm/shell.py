"""Every SLURM command goes through one `Shell`: here, or on `slurm.login` through an ssh prefix (the remote
shell gets one quoted command string), so the local and the remote cluster share one code path."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import EngineError
from ...runs.state import RunRef
from .handle import SlurmHandle
from .section import SlurmSection


@dataclass(frozen=True)
class Shell:
    """Runs commands here, or through `prefix` (ssh to the login host) as one quoted string."""

    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_section(cls, section: SlurmSection) -> Shell:
        if section.login is None:
            return cls()
        return cls(prefix=(*section.ssh_command, *section.ssh_options, section.login))

    @classmethod
    def of(cls, run: RunRef) -> Shell:
        """The shell the run was submitted through (its handle's prefix)."""
        return cls(prefix=SlurmHandle.of(run).prefix)

    @property
    def remote(self) -> bool:
        return bool(self.prefix)

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.prefix, shlex.join(args)] if self.prefix else list(args)

    def run(
        self, args: Sequence[str], stdin: bytes | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[bytes]:
        argv = self.argv(args)
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError:
            where = f"(through {self.prefix[0]})" if self.prefix else "on this machine"
            raise EngineError(
                f"{argv[0]}: command not found {where}",
                hint="run trainctl on a SLURM login node, or set slurm.login to a login host reachable by ssh",
            ) from None
        except subprocess.TimeoutExpired:
            raise EngineError(f"{shlex.join(args)} did not answer within {timeout:g}s") from None

    def text(self, args: Sequence[str], stdin: bytes | None = None, timeout: float = 60.0) -> str:
        """stdout of a command that must succeed."""
        done = self.run(args, stdin=stdin, timeout=timeout)
        if done.returncode != 0:
            raise EngineError(f"{shlex.join(args)} failed (exit {done.returncode}): {err(done)}")
        return done.stdout.decode(errors="replace")


def err(done: subprocess.CompletedProcess[bytes]) -> str:
    """What a failed command said (stderr, else stdout), for an error message."""
    return (done.stderr or done.stdout).decode(errors="replace").strip() or "no message"
