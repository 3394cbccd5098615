"""Pod Security Standards, "restricted" level (which includes "baseline"): a port of the checks in
kubernetes `staging/src/k8s.io/pod-security-admission/policy/check_*.go`, the code the PodSecurity
admission plugin runs for a namespace labelled `pod-security.kubernetes.io/enforce: restricted`.

`violations(pod_spec)` returns one line per failed check, named by its check ID, as the admission
message would; an empty list means the pod is admitted. Works on plain dicts (pod specs as JSON).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# check_restrictedVolumes.go, restrictedVolumes_1_0: the only volume sources restricted allows.
_ALLOWED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# check_sysctls.go, sysctlsV1Dot32: the safe sysctl set (baseline).
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """visitContainers (policy/visitor.go): init, regular and ephemeral containers alike."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def violations(spec: dict[str, Any]) -> list[str]:
    """The restricted-profile checks a pod spec fails (empty: admitted)."""
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    # check_hostNamespaces.go, hostNamespaces_1_0
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"host namespaces: {key}=true")
    # check_sysctls.go
    for s in psc.get("sysctls") or []:
        if s.get("name") not in _SAFE_SYSCTLS:
            out.append(f"forbidden sysctls: {s.get('name')}")
    # check_hostPathVolumes.go hostPathVolumes_1_0 and check_restrictedVolumes.go restrictedVolumes_1_0
    for v in spec.get("volumes") or []:
        sources = set(v) - {"name"}
        bad = sources - _ALLOWED_VOLUME_SOURCES
        if bad:
            out.append(f"restricted volume types: volume {v.get('name')!r} uses {', '.join(sorted(bad))}")
    # check_runAsNonRoot.go runAsNonRoot_1_0: the pod or every container sets true, none sets false
    pod_non_root = psc.get("runAsNonRoot")
    # check_runAsUser.go runAsUser_1_23: no 0
    if psc.get("runAsUser") == 0:
        out.append("runAsUser=0 (pod must not set runAsUser=0)")
    # check_seccompProfile_restricted.go seccompProfileRestricted_1_19
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append(f"seccompProfile: pod sets type {pod_seccomp}")
    # check_seLinuxOptions.go seLinuxOptions_1_0 (pod level) and check_appArmorProfile.go
    out += _selinux(psc, "pod")
    if (psc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        out.append("appArmorProfile: pod sets an unconfined profile")
    for c in _containers(spec):
        name = c.get("name")
        sc = c.get("securityContext") or {}
        # check_privileged.go privileged_1_0
        if sc.get("privileged"):
            out.append(f"privileged: container {name!r}")
        # check_allowPrivilegeEscalation.go allowPrivilegeEscalation_1_8: must be set to false
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation != false: container {name!r} must set allowPrivilegeEscalation=false")
        # check_capabilities_restricted.go capabilitiesRestricted_1_22
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f'unrestricted capabilities: container {name!r} must set capabilities.drop=["ALL"]')
        if any(cap != "NET_BIND_SERVICE" for cap in caps.get("add") or []):
            out.append(f"unrestricted capabilities: container {name!r} adds {caps.get('add')}")
        # check_runAsNonRoot.go
        if sc.get("runAsNonRoot") is False or (pod_non_root is not True and sc.get("runAsNonRoot") is not True):
            out.append(f"runAsNonRoot != true: container {name!r} (or the pod) must set runAsNonRoot=true")
        # check_runAsUser.go
        if sc.get("runAsUser") == 0:
            out.append(f"runAsUser=0: container {name!r}")
        # check_seccompProfile_restricted.go: a container without its own type inherits the pod's
        ctype = (sc.get("seccompProfile") or {}).get("type")
        if ctype is None and pod_seccomp is None:
            out.append(f"seccompProfile: container {name!r} (or the pod) must set type RuntimeDefault or Localhost")
        elif ctype not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"seccompProfile: container {name!r} sets type {ctype}")
        # check_hostPorts.go hostPorts_1_0
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"hostPort: container {name!r}")
        # check_procMount.go procMount_1_0
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"procMount: container {name!r}")
        out += _selinux(sc, f"container {name!r}")
        # check_windowsHostProcess.go windowsHostProcess_1_0
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"hostProcess: container {name!r}")
    return out


def _selinux(sc: dict[str, Any], where: str) -> list[str]:
    """check_seLinuxOptions.go seLinuxOptions_1_0: type only one of the container types, no user or role."""
    opts = sc.get("seLinuxOptions") or {}
    if opts.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"):
        return [f"seLinuxOptions: {where} sets type {opts.get('type')}"]
    if opts.get("user") or opts.get("role"):
        return [f"seLinuxOptions: {where} sets user or role"]
    return []
