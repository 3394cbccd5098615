"""A kubelet for tests: runs a pod's containers as real processes on this machine, and writes the pod's
phase, container statuses and log back to the API server (kapi serves `pods/log` from the pod
annotation `fake.kubelet/log`).

What a pod gets, as a kubelet would give it:
- its host name (`spec.hostname`, else the pod name) in its own UTS namespace, and its DNS names
  (`<hostname>.<subdomain>`, or the pod name for PyTorchJob's per-pod Services) mapped to 127.0.0.1
  in /etc/hosts (added once, marked, never removing anyone else's lines);
- its environment: `value` with `$(VAR)` expansion, `fieldRef` from the pod's own metadata
  (kubelet `podFieldSelectorRuntimeValue`), container ports and nothing else (enableServiceLinks off);
- its volumes, bind-mounted in its own mount namespace: each emptyDir a fresh per-pod directory, each
  PersistentVolumeClaim one directory per claim shared by every pod (ReadWriteMany), each configMap its
  keys (data and binaryData, or the listed `items`) written as files from the API server's object and
  mounted read-only, `subPath` honoured, `readOnly` mounts read-only;
- its command and args with `$(VAR)` expanded (kubelet `kubecontainer.ExpandContainerCommandAndArgs`).
- its termination message file: a fresh empty file (0666) per container start, mounted at the container's
  `terminationMessagePath`; when the container ends, its last 4096 bytes become the terminated state's
  `message` (kuberuntime_container.go makeMounts / getTerminationMessage: pod_termination.py);
- a command it cannot run ends the container before it starts, as containerd reports it (pod_start.py).
The trainer image is this checkout (`trainer-launch` and `python` from the project's venv), or, with
`image_runtime` ("podman"), the pod's own image run by that engine with the pod's securityContext
(pod_container.py).
An image this machine does not have is not run; the one such container the operators add (v1.9's
`init-pytorch`, an alpine `nslookup` loop until the master's name resolves) is replaced by that wait.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etc_hosts import add_hosts
from pod_container import image_ref, inspect_and_remove, run_argv
from pod_start import START_ERROR_EXIT_CODE, START_ERROR_REASON, start_error
from pod_termination import (
    TERMINATION_MESSAGE_PATH_DEFAULT,
    TERMINATION_MESSAGE_POLICY_DEFAULT,
    termination_file,
    termination_message,
)
from port_scheduler import schedule

REPO = Path(__file__).resolve().parents[2]  # the checkout: the process pods' stand-in for the image's files
LOG_ANNOTATION = "fake.kubelet/log"
HOSTS_MARK = "# trainctl-test-pods"
_LOG_LIMIT = 200_000  # annotations share a 256 KiB budget


def expand(text: str, env: dict[str, str]) -> str:
    """third_party/forked/golang/expansion/expand.go Expand: `$(VAR)` -> value if defined (else left
    as is), `$$` -> `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


_FIELD = re.compile(r"^metadata\.(annotations|labels)\['(.+)'\]$")


def field_value(pod: dict[str, Any], path: str) -> str:
    """pkg/kubelet/kubelet_pods.go podFieldSelectorRuntimeValue / fieldpath.ExtractFieldPathAsString."""
    node = pod["spec"].get("nodeName") or "localhost"
    meta = pod["metadata"]
    m = _FIELD.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": node,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path not in simple:
        raise ValueError(f"fieldRef {path!r} is not supported by the test kubelet")
    return simple[path]


@dataclass
class RunningPod:
    pod: dict[str, Any]
    proc: subprocess.Popen[bytes] | None
    log_path: Path
    restarts: int = 0
    exit_code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


class PodRunner:
    """Starts pods, polls them, and reports their state to the API server (`core`: CoreV1Api)."""

    def __init__(self, core: Any, namespace: str, workdir: Path, image_runtime: str | None = None) -> None:
        self.core = core
        self.image_runtime = image_runtime
        self.ran: dict[str, dict[str, Any]] = {}  # image path: container name -> its `inspect`
        self._containers: dict[int, str] = {}
        self.ns = namespace
        self.workdir = workdir
        self.claims = workdir / "claims"
        # The cluster's nodes (fake_node); None: every pod runs unscheduled, as before nodes existed here.
        self.nodes: list[dict[str, Any]] | None = None
        self.node_env: dict[str, dict[str, str]] = {}  # a bad node: env its pods get (a test's fault tool)
        # A service account's credentials, by account name. kubelet mounts a projected token for the pod's account
        # (the ServiceAccount admission plugin's `kube-api-access-*` volume, plugin/pkg/admission/serviceaccount/
        # admission.go) that the API server authenticates; the test API server (up.sh) authenticates client
        # certificates only, so a pod running as an account gets them as a kubeconfig. The official client's
        # `kubernetes.config.load_config` (kubernetes/config/__init__.py) reads KUBECONFIG before the in-cluster
        # token, so the controller's own code path is the same either way.
        self.credentials: dict[str, dict[str, str]] = {}
        self.started: dict[str, RunningPod] = {}  # every pod given to this kubelet, by name
        self.live: dict[str, RunningPod] = {}  # pods bound to a node and not ended: the node's pod count

    def schedule(self, rp: RunningPod) -> bool:
        """The scheduler's one cycle for a pending pod (port_scheduler.schedule): bind it to the first node
        that passes the filters and record PodScheduled True, or leave it Pending with the scheduler's
        PodScheduled False / Unschedulable condition and FitError message (pkg/scheduler/schedule_one.go
        handleSchedulingFailure: reason v1.PodReasonUnschedulable). kapi serves no Binding subresource
        (and does not guard spec.nodeName), so the binding is a patch of spec.nodeName."""
        assert self.nodes is not None
        load: dict[str, int] = {}
        for other in self.live.values():
            node = other.pod["spec"].get("nodeName")
            load[node] = load.get(node, 0) + 1
        node, message = schedule(rp.pod, self.nodes, load)
        if node is None:
            cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            if rp.extra.get("unschedulable") != message:
                rp.extra["unschedulable"] = message
                self._patch(rp, {"phase": "Pending", "conditions": [cond]})
            return False
        rp.pod["spec"]["nodeName"] = node
        self.live[rp.name] = rp
        self.core.patch_namespaced_pod(rp.name, self.ns, {"spec": {"nodeName": node}})
        self._patch(rp, {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
        return True

    def hostnames(self, pod: dict[str, Any]) -> tuple[str, list[str]]:
        spec = pod["spec"]
        host = spec.get("hostname") or pod["metadata"]["name"]
        names = [host]
        if spec.get("subdomain"):
            names.append(f"{host}.{spec['subdomain']}")
        return host, names

    def env(self, pod: dict[str, Any], container: dict[str, Any], host: str) -> dict[str, str]:
        venv = REPO / ".venv" / "bin"
        # the machine's own threads: 2 cores shared by every "pod"
        env: dict[str, str] = {"OMP_NUM_THREADS": "1"}
        if not self.image_runtime:  # the image's own PATH and HOME otherwise
            env |= {"PATH": f"{venv}:/usr/local/bin:/usr/bin:/bin", "HOSTNAME": host, "HOME": "/home/trainer",
                    "PYTHONPATH": str(REPO / "trainer_image")}  # fmt: skip
        for item in container.get("env") or []:
            if "valueFrom" in item:
                ref = item["valueFrom"].get("fieldRef")
                if ref is None:
                    raise ValueError(f"env {item['name']}: only fieldRef sources are supported by the test kubelet")
                env[item["name"]] = field_value(pod, ref["fieldPath"])
            else:
                env[item["name"]] = expand(item.get("value", ""), env)
        account = self.credentials.get(pod["spec"].get("serviceAccountName") or "", {})
        return env | account | self.node_env.get(pod["spec"].get("nodeName", ""), {})

    def configmap_volume(self, pod: dict[str, Any], name: str, source: dict[str, Any]) -> Path:
        """pkg/volume/configmap/configmap.go SetUpAt + MakePayload: the ConfigMap's keys as files (all of
        data and binaryData, or only `items`, key -> path); a missing ConfigMap or key fails the pod
        unless `optional`. Written once per pod, as the kubelet's atomic writer leaves them (0644)."""
        target = self.workdir / "pods" / pod["metadata"]["name"] / "volumes" / name
        if target.exists():
            return target
        try:
            found = self.core.read_namespaced_config_map(source["name"], self.ns)
        except Exception as exc:
            if source.get("optional"):
                target.mkdir(parents=True)
                return target
            raise RuntimeError(f"configmap {source['name']!r} not found: {exc}") from exc
        cm = self.core.api_client.sanitize_for_serialization(found)
        payload = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        payload |= {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}
        items = source.get("items") or [{"key": k, "path": k} for k in payload]
        target.mkdir(parents=True)
        for item in items:
            if item["key"] not in payload:
                if source.get("optional"):
                    continue
                raise RuntimeError(f"configmap references non-existent config key: {item['key']}")
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload[item["key"]])
            path.chmod(item.get("mode", source.get("defaultMode", 0o644)))
        return target

    def mounts(self, pod: dict[str, Any], container: dict[str, Any]) -> list[tuple[str, str, bool]]:
        """(host directory, mount path, read-only) for each volumeMount, /tmp last (the sources live under it)."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        out: list[tuple[str, str, bool]] = []
        for m in container.get("volumeMounts") or []:
            vol = volumes[m["name"]]
            read_only = bool(m.get("readOnly"))
            if "persistentVolumeClaim" in vol:
                base = self.claims / vol["persistentVolumeClaim"]["claimName"]
            elif "emptyDir" in vol:
                base = self.workdir / "pods" / pod["metadata"]["name"] / "volumes" / m["name"]
                base.mkdir(parents=True, exist_ok=True)
                base.chmod(0o777)  # pkg/volume/emptydir/empty_dir.go: perm 0777
            elif "configMap" in vol:
                base, read_only = self.configmap_volume(pod, m["name"], vol["configMap"]), True
            else:
                raise ValueError(f"volume {m['name']}: the test kubelet mounts only emptyDir, PVCs and configMaps")
            src = base / m.get("subPath", "")
            if not src.exists():
                src.mkdir(parents=True)
            out.append((str(src), m["mountPath"], read_only))
        return sorted(out, key=lambda mount: mount[1] == "/tmp")

    def start(self, pod: dict[str, Any]) -> RunningPod:
        """Place the pod on a node (when the cluster has nodes; one that fits none stays Pending, `poll`
        tries again), run its init containers (in order), then start its first container; phase Running."""
        log_path = self.workdir / "pods" / pod["metadata"]["name"] / "log.txt"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        rp = self.started[pod["metadata"]["name"]] = RunningPod(pod=pod, proc=None, log_path=log_path)
        if self.nodes is None or self.schedule(rp):
            self._run(rp)
        return rp

    def _run(self, rp: RunningPod) -> None:
        host, names = self.hostnames(rp.pod)
        if not add_hosts(names, mark=HOSTS_MARK):
            raise RuntimeError(
                f"cannot write /etc/hosts: the test kubelet maps {names} to 127.0.0.1 there (run as root)"
            )
        for init in rp.pod["spec"].get("initContainers") or []:
            self._init_container(rp.pod, init, host, rp.log_path)
        self._spawn(rp, host)
        if rp.proc is not None:
            self._patch(rp, {"phase": "Running", "containerStatuses": [self._status(rp, running=True)]})

    def _spawn(self, rp: RunningPod, host: str) -> None:
        container = rp.pod["spec"]["containers"][0]
        env = self.env(rp.pod, container, host)
        argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        if not self.image_runtime and (said := start_error(argv, env)):
            rp.extra["start_error"] = said  # nothing runs and nothing is logged; `poll` reports it ended
            rp.log_path.touch()
            return
        # a process pod runs no image, so its kubelet reports no image ID ("")
        rp.extra["imageID"] = image_ref(self.image_runtime, container["image"]) if self.image_runtime else ""
        # kuberuntime_container.go makeMounts: a new file per container start (PodContainerDir/<random id>),
        # chmod 0666, mounted read-write at terminationMessagePath
        path = container.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH_DEFAULT
        host_file = rp.extra["termination_log"] = termination_file(
            rp.log_path.parent / "containers" / container["name"]
        )
        rp.proc = self._popen(rp.pod, container, host, env, argv, rp.log_path, (str(host_file), path))

    def _popen(
        self,
        pod: dict[str, Any],
        c: dict[str, Any],
        host: str,
        env: dict[str, str],
        argv: list[str],
        log: Path,
        termination: tuple[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one container; `termination`: (host file, container path) of its termination message."""
        name = ""
        if self.image_runtime:
            name = f"{self.ns}-{pod['metadata']['name']}-{c['name']}-{time.monotonic_ns()}"
            argv = run_argv(self.image_runtime, name, pod, c, host, env, self.mounts(pod, c), argv)
            if termination:  # `podman run --volume=FILE:PATH:rw ...`
                argv.insert(2, f"--volume={termination[0]}:{termination[1]}:rw")
            wrapper, env = [], dict(os.environ)
        else:
            script = [f"hostname {shlex.quote(host)}"]
            if termination:  # first: the pod's own /tmp, mounted below, hides the host file
                # a container runtime creates the mount point inside the container's own /dev; a process pod
                # shares this machine's /dev, so the (empty) mount point is made there once, and only the
                # pod's mount namespace sees its file bound on it
                src, dst = map(shlex.quote, termination)
                script.append(f"[ -e {dst} ] || touch {dst}; mount --bind {src} {dst}")
            for src, dst, read_only in self.mounts(pod, c):
                if dst == "/tmp" and REPO.is_relative_to("/tmp"):
                    # a checkout under /tmp (the image's files, for a process pod) stays visible under the pod's /tmp
                    keep = shlex.quote(f"{src}/{REPO.relative_to('/tmp')}")
                    script.append(f"mkdir -p {keep} && mount --bind {shlex.quote(str(REPO))} {keep}")
                bind = "--rbind" if dst == "/tmp" else "--bind"  # rbind: the checkout bound inside it comes along
                script.append(f"mkdir -p {shlex.quote(dst)} && mount {bind} {shlex.quote(src)} {shlex.quote(dst)}")
                if read_only:
                    script.append(f"mount -o remount,bind,ro {shlex.quote(dst)}")
            script.append('exec "$@"')
            wrapper = ["unshare", "--mount", "--uts", "--propagation", "private", "bash", "-ec", "\n".join(script)]
            wrapper.append("pod")
        out = open(log, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                [*wrapper, *argv], env=env, stdout=out, stderr=subprocess.STDOUT, cwd="/", start_new_session=True
            )
        finally:
            out.close()
        if name:
            self._containers[proc.pid] = name
        return proc

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """Image path: record what the engine ran, then remove the ended container."""
        name = self._containers.pop(proc.pid, None)
        if name and self.image_runtime:
            self.ran[name] = inspect_and_remove(self.image_runtime, name)

    def _init_container(self, pod: dict[str, Any], c: dict[str, Any], host: str, log: Path) -> None:
        if c["name"] == "init-pytorch":
            # v1.9 initcontainer.go: `nslookup <job>-master-0` until it resolves (alpine image).
            master = re.search(r"nslookup (\S+);", " ".join(c.get("command") or []))
            assert master, c
            for _ in range(100):
                try:
                    socket.getaddrinfo(master.group(1), None)
                    return
                except OSError:
                    time.sleep(0.2)
            raise RuntimeError(f"init-pytorch: {master.group(1)} never resolved")
        env = self.env(pod, c, host)
        argv = [expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
        proc = self._popen(pod, c, host, env, argv, log)
        code = proc.wait()
        self._reap(proc)
        if code != 0:
            raise RuntimeError(f"init container {c['name']} exited {code}")

    def restart(self, rp: RunningPod) -> None:
        """Restart the container in place (restartPolicy OnFailure/Always): restartCount + 1, still Running."""
        rp.restarts += 1
        rp.exit_code = None
        host, _ = self.hostnames(rp.pod)
        self._spawn(rp, host)
        self._patch(rp, {"phase": "Running", "containerStatuses": [self._status(rp, running=True)]})

    def poll(self, rp: RunningPod) -> int | None:
        """The container's exit code once it has ended (and the log so far written back); a pending pod
        gets another scheduling cycle (the scheduler retries unschedulable pods) and None."""
        if "start_error" in rp.extra:
            rp.exit_code = START_ERROR_EXIT_CODE
            return rp.exit_code
        if rp.proc is None:
            if self.nodes is not None and self.schedule(rp):
                self._run(rp)
            return None
        code = rp.proc.poll()
        self._patch_log(rp)
        if code is None:
            return None
        self._reap(rp.proc)
        rp.exit_code = code if code >= 0 else 128 - code  # killed by signal N -> 128+N, as a runtime reports
        return rp.exit_code

    def finish(self, rp: RunningPod, phase: str) -> None:
        """Write the final phase (Succeeded/Failed) with the container's terminated state; the pod no longer
        counts on its node (a terminal pod takes no room)."""
        self.live.pop(rp.name, None)
        self._patch_log(rp)
        self._patch(rp, {"phase": phase, "containerStatuses": [self._status(rp, running=False)]})

    def kill(self, rp: RunningPod) -> None:
        """SIGTERM, then SIGKILL after a grace period (the pod is being deleted); its node is free again. As
        kubelet's SyncTerminatingPod does (pkg/kubelet/kubelet.go: kill the pod, then set its status), the
        container's terminated state, its termination message included, is written before the pod goes:
        also for a container that had already ended and that no controller had polled yet."""
        self.live.pop(rp.name, None)
        if rp.proc is None or rp.exit_code is not None:
            return
        if rp.proc.poll() is None:
            os.killpg(rp.proc.pid, 15)
            try:
                rp.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(rp.proc.pid, 9)
                rp.proc.wait()
        self._reap(rp.proc)
        code = rp.proc.returncode
        rp.exit_code = code if code >= 0 else 128 - code
        self._patch_log(rp)
        self._patch(rp, {"phase": "Failed" if rp.exit_code else "Succeeded",
                         "containerStatuses": [self._status(rp, running=False)]})  # fmt: skip

    def _status(self, rp: RunningPod, running: bool) -> dict[str, Any]:
        c = rp.pod["spec"]["containers"][0]
        state: dict[str, Any] = (
            {"running": {"startedAt": "2026-11-22T00:00:00Z"}}
            if running
            else {"terminated": {"exitCode": rp.exit_code, "reason": "Completed" if rp.exit_code == 0 else "Error"}}
        )
        if not running and "start_error" in rp.extra:
            state["terminated"] |= {"reason": START_ERROR_REASON, "message": rp.extra["start_error"]}
        elif not running:  # kuberuntime_manager/convertToAPIContainerStatuses: `message` when there is one
            policy = c.get("terminationMessagePolicy") or TERMINATION_MESSAGE_POLICY_DEFAULT
            message = termination_message(rp.extra.get("termination_log"), policy, rp.exit_code or 0, rp.log_path)
            if message:
                state["terminated"]["message"] = message
        return {"name": c["name"], "image": c.get("image", ""), "imageID": rp.extra.get("imageID", ""),
                "ready": running, "restartCount": rp.restarts, "state": state}  # fmt: skip

    def _patch(self, rp: RunningPod, status: dict[str, Any]) -> None:
        """Write the pod's status; the API server's answer is kept as the pod's last known object."""
        found = self.core.patch_namespaced_pod(rp.name, self.ns, {"status": status})
        rp.extra["api"] = self.core.api_client.sanitize_for_serialization(found)

    def _patch_log(self, rp: RunningPod) -> None:
        text = rp.log_path.read_text(errors="replace")[-_LOG_LIMIT:]
        if rp.extra.get("log") != text:
            rp.extra["log"] = text
            self.core.patch_namespaced_pod(rp.name, self.ns, {"metadata": {"annotations": {LOG_ANNOTATION: text}}})


def python() -> str:
    return sys.executable
