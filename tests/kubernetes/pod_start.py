"""A container the runtime cannot start, as containerd and runc report it, for the test kubelet's process pods.

runc looks the container's command up before it starts anything (opencontainers/runc
libcontainer/standard_init_linux.go: `exec.LookPath(l.config.Args[0])`, in the container's own PATH) and fails
the create with Go's `exec.Error`. containerd's CRI then marks the container exited with reason `StartError`,
exit code 128 and the whole error as its message (containerd internal/cri/server/container_start.go
StartContainer: errorStartReason, errorStartExitCode, `failed to create containerd task: %w`), which the kubelet
copies into the pod's `state.terminated`. A process pod's file system is this machine's, so the lookup runs here,
in the pod's PATH.
"""

from __future__ import annotations

import os
import stat

START_ERROR_REASON = "StartError"
START_ERROR_EXIT_CODE = 128
# containerd's, the shim's and runc's wrappings of runc's error, outermost first; `unknown` is the gRPC code
_WRAPPED = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: {}: unknown"
)


def _find_executable(path: str) -> str | None:
    """Go's os/exec lp_unix.go findExecutable: None when `path` may be run, else the error's words."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"stat {path}: no such file or directory"
    except NotADirectoryError:
        return f"stat {path}: not a directory"
    if stat.S_ISDIR(mode):
        return "is a directory"  # syscall.EISDIR's words
    return None if os.access(path, os.X_OK) else "permission denied"


def look_path(name: str, path_env: str) -> str | None:
    """Go's exec.LookPath: None when `name` resolves, else exec.Error's words (`exec: "name": ...`)."""
    if "/" in name:
        why = _find_executable(name)
        return None if why is None else f'exec: "{name}": {why}'
    for folder in path_env.split(os.pathsep):
        if _find_executable(os.path.join(folder or ".", name)) is None:
            return None
    return f'exec: "{name}": executable file not found in $PATH'


def start_error(argv: list[str], env: dict[str, str]) -> str | None:
    """containerd's message for a container whose command cannot be run, or None when it can."""
    said = look_path(argv[0], env.get("PATH", "")) if argv else 'exec: "": executable file not found in $PATH'
    return None if said is None else _WRAPPED.format(said)
