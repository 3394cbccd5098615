"""Why a Kubernetes attempt ended, and which nodes it blames: its pods' container statuses joined with the
trainer's failure record. Pure: the engine (or a test) hands in the pods as the API server holds them.

The pods' words (core/v1 types.go): a container's `state.terminated` (`exitCode`, `reason`: `OOMKilled`
when the kernel's OOM killer ended it, `Error`, `Completed`) and the pod's `status.reason` (`NodeLost` from
the node lifecycle controller when its node stopped answering; `Evicted` under node pressure). A pod's node
is `spec.nodeName`; trainctl passes it to the trainer as TRAINCTL_NODE_NAME (pod.py), so the suspects in
failure.json already carry Kubernetes node names. The trainer's record reaches the API server compact, as
its container's termination message (`state.terminated.message`, trainer/records.py write_failure): that is
what trainctl reads, from outside the cluster, when it cannot read failure.json on the PVC; a program's error
(its first failing rank, exception and last lines) travels the same way. A retry's pods are kept off every blamed node by a
required node anti-affinity (pod.avoiding_nodes).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...runs.causes import EXIT_PREEMPTED, AttemptEnd, Cause, blamed_nodes, failure_of_attempt, from_trainer
from ...runs.state import Attempt, RunState

_NODE_GONE = ("NodeLost", "Evicted")
# The runtime could not start the container: containerd's CRI marks it exited with reason StartError, exit code
# 128 and its error as the message (internal/cri/server/container_start.go StartContainer: errorStartReason,
# errorStartExitCode); dockershim and cri-dockerd say ContainerCannotRun.
START_FAILED = ("StartError", "ContainerCannotRun")
# runc looks the command up before it starts anything (libcontainer/standard_init_linux.go: exec.LookPath on the
# first argument) and fails the create with Go's exec.Error: `exec: "NAME": executable file not found in $PATH`,
# `exec: "/PATH": stat /PATH: no such file or directory`, `exec: "/PATH": permission denied`; containerd's message
# ends with the gRPC code, `: unknown`.
_EXEC_FAILED = re.compile(r'exec:? "(?P<program>[^"]+)": (?P<why>.+?)(?:: unknown)?$')
NODES_NAMED = 16  # an attempt's record names this many of its nodes, then counts the rest (`nodes_said`)


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    """The first container's terminated state ({} while it runs or never ran)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        return dict((cs.get("state") or {}).get("terminated") or {})
    return {}


def _node(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def termination_record(pods: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The trainer's failure record from the containers' termination messages (a JSON object with a `kind`; a
    message that is not, a program's own words or none, is skipped): the first verdict (a hang, a slow node),
    else the program error that happened first (`failed_at`: each pod's launcher names its own first failing
    rank, trainer/first_failure.py)."""
    found = []
    for pod in pods:
        message = _terminated(pod).get("message")
        with contextlib.suppress(ValueError):
            record = json.loads(message) if message else None
            if isinstance(record, dict) and record.get("kind"):
                found.append(record)
    verdicts = [r for r in found if r.get("kind") != "error"]
    errors = sorted((r for r in found if r.get("kind") == "error"), key=lambda r: float(r.get("failed_at") or 0))
    first = verdicts or errors
    return first[0] if first else None


def start_failure(pods: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """A failure record (kind `error`, source `runtime`) for the first pod whose container the runtime could not
    start, now or at its last start (`lastState`, a container the kubelet restarts); None where every one started.
    A command the image lacks (`program`) is named with its fix; another start error keeps the runtime's words."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            for state in (cs.get("state"), cs.get("lastState")):
                ended = (state or {}).get("terminated") or {}
                if ended.get("reason") in START_FAILED:
                    return _start_record(pod, str(cs.get("image") or ""), ended)
            break  # the first container is the trainer's
    return None


def _start_record(pod: dict[str, Any], image: str, ended: dict[str, Any]) -> dict[str, Any]:
    said = str(ended.get("message") or ended["reason"]).strip()
    message, program = said, None
    if found := _EXEC_FAILED.search(said):
        program = found["program"]
        if found["why"].endswith("permission denied"):
            fix = f"{program} must be executable in the image"
        elif program == "trainer-launch":
            fix = f"the image {image} does not have the trainer installed; build it FROM the trainer image (trainer_image/)"
        else:
            fix = f"the image {image} has no {program}; install it there, or name a program the image has"
        message = f'exec: "{program}": {found["why"]}: {fix}'
    finished = None
    with contextlib.suppress(TypeError, ValueError):
        finished = datetime.fromisoformat(str(ended.get("finishedAt")).replace("Z", "+00:00")).timestamp()
    return {"kind": "error", "source": "runtime", "node": _node(pod) or None, "exit_code": ended.get("exitCode"),
            "time": finished, "program": program, "message": message, "log_tail": [said]}  # fmt: skip


def classify(pods: Sequence[dict[str, Any]], record: dict[str, Any] | None) -> AttemptEnd:
    """How an attempt ended; cause None when no pod failed. `record`:
    the failure.json handed in, else the one the pods' termination messages carry.

    The trainer's record and exit code decide first (a hang or slow node blames its suspects' nodes; exit 2
    is invalid input anywhere); then a command the image lacks (a start error: invalid, a retry would fail the
    same way); then a pod whose node was lost or that the OOM killer ended; pods that all
    ended 143 were signalled together (a preemption, a drain); otherwise the first other failure is the
    program's own error. 143s beside a real failure are the operator tearing the rest down, never the cause."""
    record = record if record is not None else termination_record(pods)
    ends = [(pod, _terminated(pod)) for pod in pods]
    failed = [(pod, t) for pod, t in ends if t.get("exitCode") not in (None, 0)]
    codes = [int(t["exitCode"]) for _, t in failed]
    gone = [pod for pod in pods if (pod.get("status") or {}).get("reason") in _NODE_GONE]
    if not failed and not gone:
        return AttemptEnd(None)
    real = [c for c in codes if c != EXIT_PREEMPTED]
    code = real[0] if real else (codes[0] if codes else None)
    for candidate in [*real, *codes]:
        said = from_trainer(candidate, record)
        if said is not None and (said is not Cause.PREEMPTED or not (real or gone)):
            return AttemptEnd(said, tuple(blamed_nodes(record)), candidate)
    started = start_failure(pods)
    if started and started["program"]:
        return AttemptEnd(Cause.INVALID, (), started["exit_code"])
    if gone:
        return AttemptEnd(Cause.NODE_LOST, tuple(dict.fromkeys(n for n in map(_node, gone) if n)), code)
    oom = [pod for pod, t in failed if t.get("reason") == "OOMKilled"]
    if oom:
        return AttemptEnd(Cause.OUT_OF_MEMORY, (), code)
    return AttemptEnd(Cause.APPLICATION_ERROR, (), code)


def attempt_of(
    number: int,
    engine_id: str,
    pods: Sequence[dict[str, Any]],
    record: dict[str, Any] | None = None,
    started_at: float | None = None,
    ended_at: float | None = None,
) -> Attempt:
    """One attempt (one TrainJob or PyTorchJob object) from its pods at their end and the failure record
    this attempt wrote (failure.json, else its pods' termination messages; an older one, from an earlier
    attempt, is ignored)."""
    record = record if record is not None else termination_record(pods)
    end = classify(pods, failure_of_attempt(record, started_at) or {})
    nodes = nodes_said(list(dict.fromkeys(n for n in map(_node, pods) if n)))
    state = RunState.FAILED if end.cause is not None else RunState.SUCCEEDED
    return Attempt(number=number, engine_id=engine_id, state=state, cause=end.cause, exit_code=end.exit_code,
                   nodes=nodes, blamed_nodes=list(end.blamed), started_at=started_at, ended_at=ended_at)  # fmt: skip


def nodes_said(names: Sequence[str]) -> str | None:
    """Where an attempt ran, as the run's object records it: every node up to NODES_NAMED, else the first ones
    and how many. The record is an annotation of the run's object, and the API server holds an object's
    annotations to 256 KiB in all (apimachinery pkg/api/validation/objectmeta.go `TotalAnnotationSizeLimitB`,
    `ValidateAnnotations`): 1,024 EKS node names are about 45 KB, so the sixth attempt's record would be refused.
    The nodes a retry avoids are the blamed ones, which the record keeps in full."""
    if len(names) <= NODES_NAMED:
        return ",".join(names) or None
    return f"{','.join(names[:NODES_NAMED])} and {len(names) - NODES_NAMED} more ({len(names)} nodes)"


def avoided(attempts: Sequence[Attempt]) -> list[str]:
    """Every node blamed so far, in the order first blamed: what the next attempt's pods must not land on."""
    return list(dict.fromkeys(n for a in attempts for n in a.blamed_nodes))
