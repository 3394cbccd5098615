"""The test kubelet's termination messages: how kubelet turns the file a container wrote at its
`terminationMessagePath` into `status.containerStatuses[].state.terminated.message`."""

from __future__ import annotations

import time
from pathlib import Path

# pkg/kubelet/container/runtime.go: MaxContainerTerminationMessageLength, and for FallbackToLogsOnError
# MaxContainerTerminationMessageLogLength / MaxContainerTerminationMessageLogLines.
MAX_TERMINATION_MESSAGE = 1024 * 4
MAX_TERMINATION_LOG_BYTES, MAX_TERMINATION_LOG_LINES = 1024 * 2, 80
# pkg/apis/core/v1/defaults.go SetDefaults_Container: the API server fills these in; kapi does no defaulting.
TERMINATION_MESSAGE_PATH_DEFAULT, TERMINATION_MESSAGE_POLICY_DEFAULT = "/dev/termination-log", "File"


def termination_message(host_file: Path | None, policy: str, exit_code: int, log: Path) -> str:
    """pkg/kubelet/kuberuntime/kuberuntime_container.go getTerminationMessage: the last
    MaxContainerTerminationMessageLength bytes of the file mounted at terminationMessagePath
    (tail.ReadAtMost); with policy FallbackToLogsOnError, a failed container whose file is empty gets the
    tail of its log instead (readLastStringFromContainerLogs: the last 80 lines, at most 2048 bytes)."""
    data = b""
    if host_file is not None and host_file.exists():
        with open(host_file, "rb") as fh:
            fh.seek(max(0, host_file.stat().st_size - MAX_TERMINATION_MESSAGE))
            data = fh.read()
    if not data and policy == "FallbackToLogsOnError" and exit_code != 0:
        lines = log.read_bytes().splitlines(keepends=True)[-MAX_TERMINATION_LOG_LINES:]
        data = b"".join(lines)[-MAX_TERMINATION_LOG_BYTES:]
    return data.decode("utf-8", "replace")


def termination_file(container_dir: Path) -> Path:
    """kuberuntime_container.go makeMounts: a new empty file per container start (PodContainerDir/<random
    id>, so a restart never reads its predecessor's message), chmod 0666 whatever the umask."""
    container_dir.mkdir(parents=True, exist_ok=True)
    path = container_dir / f"{time.monotonic_ns():x}"
    path.touch()
    path.chmod(0o666)
    return path
