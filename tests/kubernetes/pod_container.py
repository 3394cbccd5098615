"""The test kubelet's image path: a pod's container started from its image with podman (runc), as the
kubelet's container runtime would start it (pkg/kubelet/kuberuntime/kuberuntime_container.go
generateContainerConfig, and security_context.go determineEffectiveSecurityContext for the security part).

What the container gets from the pod: the effective securityContext (runAsUser/runAsGroup, fsGroup and
supplementalGroups as extra groups, readOnlyRootFilesystem with no runtime tmpfs added, capabilities,
allowPrivilegeEscalation, privileged; runAsNonRoot checked as verifyRunAsNonRoot does), its volumes as
the pod runner prepared them (emptyDir and PVC directories bind-mounted, fsGroup ownership applied as
pkg/volume/volume_linux.go SetVolumeOwnership does; `medium: Memory` emptyDirs as tmpfs; configMaps
read-only), its env, `command`/`args` over the image's ENTRYPOINT/CMD, host network and its host name.
Names resolve through the host's /etc/hosts (mounted read-only, live), the cluster DNS of these tests.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "k": 1000, "M": 1000**2, "G": 1000**3}


def _bytes(quantity: str) -> int:
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(quantity)


def effective_security(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """security_context.go determineEffectiveSecurityContext: the container's fields over the pod's."""
    psc, csc = pod["spec"].get("securityContext") or {}, container.get("securityContext") or {}
    merged = {k: psc[k] for k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile") if k in psc}
    return {**merged, **csc}


def set_volume_ownership(path: Path, gid: int) -> None:
    """pkg/volume/volume_linux.go SetVolumeOwnership (fsGroupChangePolicy Always): every file and folder
    gets group `gid`, group read/write (and x on folders), folders setgid so new files inherit it."""
    for root, dirs, files in os.walk(path):
        for name in [".", *dirs, *files]:
            p = Path(root) / name
            os.chown(p, -1, gid, follow_symlinks=False)
            mode = stat.S_IMODE(p.lstat().st_mode)
            is_dir = p.is_dir() and not p.is_symlink()
            os.chmod(p, mode | (0o2770 if is_dir else 0o660 | (0o010 if mode & 0o100 else 0)))


def run_argv(runtime: str, name: str, pod: dict[str, Any], container: dict[str, Any], host: str,
             env: dict[str, str], mounts: list[tuple[str, str, bool]], argv: list[str]) -> list[str]:  # fmt: skip
    """`podman run` of the pod's container; `argv`: its command+args, `$(VAR)`-expanded by the kubelet."""
    sc = effective_security(pod, container)
    psc = pod["spec"].get("securityContext") or {}
    user, group = sc.get("runAsUser"), sc.get("runAsGroup")
    if sc.get("runAsNonRoot") and user == 0:
        raise RuntimeError("container's runAsUser breaks non-root policy")  # verifyRunAsNonRoot's words
    out = [runtime, "run", "--name", name, "--pull=never", "--network=host", f"--hostname={host}"]
    out += ["--label", "io.trainctl.test-pod=1", "--volume=/etc/hosts:/etc/hosts:ro"]
    if user is not None:
        out.append(f"--user={user}:{group}" if group is not None else f"--user={user}")
    for gid in [*([psc["fsGroup"]] if "fsGroup" in psc else []), *psc.get("supplementalGroups", [])]:
        out.append(f"--group-add={gid}")
    if sc.get("readOnlyRootFilesystem"):
        out += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("privileged"):
        out.append("--privileged")
    if sc.get("allowPrivilegeEscalation") is False:
        out.append("--security-opt=no-new-privileges")
    caps = sc.get("capabilities") or {}
    out += [f"--cap-drop={c}" for c in caps.get("drop") or []] + [f"--cap-add={c}" for c in caps.get("add") or []]
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    memory = {
        m["mountPath"]: (volumes[m["name"]]["emptyDir"].get("sizeLimit") or "64Mi")
        for m in container.get("volumeMounts") or []
        if (volumes[m["name"]].get("emptyDir") or {}).get("medium") == "Memory"
    }
    for src, dst, read_only in mounts:
        if dst in memory:
            out.append(f"--mount=type=tmpfs,destination={dst},tmpfs-size={_bytes(memory[dst])},tmpfs-mode=1777")
            continue
        if "fsGroup" in psc and not read_only:
            set_volume_ownership(Path(src), int(psc["fsGroup"]))
        out.append(f"--volume={src}:{dst}:{'ro' if read_only else 'rw'}")
    if container.get("workingDir"):
        out.append(f"--workdir={container['workingDir']}")
    out += [f"--env={k}={v}" for k, v in env.items()]
    image = container["image"]
    if container.get("command"):  # command replaces the ENTRYPOINT (and drops the image's CMD)
        return [*out, f"--entrypoint={argv[0]}", image, *argv[1:]]
    return [*out, image, *argv]


def image_ref(runtime: str, image: str) -> str:
    """The ID of the pod's image as a CRI runtime reports it, "" when the engine does not hold the image.

    pkg/kubelet/kuberuntime/kuberuntime_image.go GetImageRef: the CRI ImageStatus's `Image.Id`; the
    container is created from it, and its CRI ContainerStatus `ImageRef` becomes the pod's
    `containerStatuses[].imageID` (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses:
    `ImageID: cs.ImageRef`). containerd's CRI (internal/cri/server/container_status.go ContainerStatus)
    reports the image's repo digest when it was pulled from a registry, else the image ID itself,
    `sha256:<config digest>`: what a locally built or imported image (`kind load`, `ctr images import`)
    shows. The trainer image here is built locally, so: `sha256:` + podman's image ID (the config digest).
    """
    done = subprocess.run(
        [runtime, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True, timeout=60
    )
    return f"sha256:{done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else ""


def inspect_and_remove(runtime: str, name: str) -> dict[str, Any]:
    """What the engine ran (user, read-only root, mounts), read before the container is removed."""
    done = subprocess.run([runtime, "container", "inspect", name], capture_output=True, text=True, timeout=60)
    subprocess.run([runtime, "rm", "--force", name], capture_output=True, timeout=60, check=False)
    return json.loads(done.stdout)[0] if done.returncode == 0 else {}
