"""Names the tests map in /etc/hosts: appended once each, under a lock, marked; nobody else's lines touched.

Two users:
- the test kubelet maps each pod's host name and Service names to 127.0.0.1 (tests/kubernetes/pod_runner.py);
- every session maps the v4-mapped loopback address `::ffff:127.0.0.1` back to `localhost`. torch's TCPStore
  server listens dual-stack, so each client it accepts is `::ffff:127.0.0.1`, whose name it looks up
  (`UvTcpSocket::startRead` -> `formatSockAddr` -> `getnameinfo` without `NI_NUMERICHOST`,
  torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp and socket.cpp). /etc/hosts names only `127.0.0.1`, so
  the lookup went to the machine's resolver: a query leaving the machine, against the tests' loopback-only
  rule, and 4 of 100 TCPStore connects stalled 5 s (glibc's resolver timeout; 20 s per 100 connects, 0.01 s
  with the line; docs/scale.md).
"""

from __future__ import annotations

import fcntl
from pathlib import Path

HOSTS = Path("/etc/hosts")
LOCK = "/tmp/trainctl-etc-hosts.lock"
V4_MAPPED_LOOPBACK = "::ffff:127.0.0.1"


def add_hosts(names: list[str], address: str = "127.0.0.1", mark: str = "# trainctl-tests") -> bool:
    """Map `names` to `address` where /etc/hosts does not already; False when it cannot be written."""
    try:
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            text = HOSTS.read_text()
            known = {
                (words[0], name)
                for line in text.splitlines()
                if (words := line.split("#")[0].split())
                for name in words[1:]
            }
            missing = [n for n in dict.fromkeys(names) if (address, n) not in known]
            if missing:
                with HOSTS.open("a") as hosts:  # append in place: /etc/hosts may be a bind mount
                    if text and not text.endswith("\n"):
                        hosts.write("\n")
                    hosts.write(f"{address} {' '.join(missing)} {mark}\n")
        return True
    except OSError:  # not root, or a read-only /etc/hosts: the lookups stay as the machine makes them
        return False


def map_v4_mapped_loopback() -> bool:
    """`::ffff:127.0.0.1 localhost`, so the TCPStore server's lookup of each client is answered from the file."""
    return add_hosts(["localhost"], V4_MAPPED_LOOPBACK)
