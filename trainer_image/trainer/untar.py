"""Extract a code tarball the way `tarfile`'s "data" filter does, on every Python the image has.

Extraction filters arrived in Python 3.11.4 (and 3.10.12); Debian bookworm's python3.11, the cpu
image's Python, is 3.11.2 and has no `filter=` argument. Where the filter exists it is used;
otherwise `data_member` applies the same rules, ported from CPython's Lib/tarfile.py
(`_get_filtered_attrs` with `for_data=True`, i.e. `data_filter`): no absolute names, nothing
outside the destination (leading slashes stripped), links only to inside it, no device or FIFO members, no set-uid/set-gid/
sticky bits, no group/other write, owners dropped.
"""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import Path


class UnsafeMember(ValueError):
    """A member the "data" filter refuses (the message says which and why)."""


def data_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """The member as `tarfile.data_filter` would pass it, or UnsafeMember (port of CPython 3.12)."""
    dest_path = os.path.realpath(dest)
    name = member.name.lstrip("/" + os.sep)  # leading slashes are stripped, as data_filter does
    if os.path.isabs(name):
        raise UnsafeMember(f"{member.name!r}: absolute path")
    target = os.path.realpath(os.path.join(dest_path, name))
    if os.path.commonpath([target, dest_path]) != dest_path:
        raise UnsafeMember(f"{name!r}: would be extracted outside {dest}")
    mode = member.mode & 0o755  # strip set-uid, set-gid, sticky and group/other write
    if member.isreg() or member.islnk():
        if not mode & 0o100:  # not executable by the owner -> not executable at all
            mode &= ~0o111
        mode |= 0o600
    elif member.isdir():
        mode = 0o755  # data_filter leaves directories to the umask; 3.11.2's extractall needs a mode
    elif not member.issym():
        raise UnsafeMember(f"{name!r}: a special file (device or FIFO)")
    if member.islnk() or member.issym():
        link = member.linkname
        if os.path.isabs(link):
            raise UnsafeMember(f"{name!r}: link to the absolute path {link!r}")
        base = dest_path if member.islnk() else os.path.dirname(target)
        linked = os.path.realpath(os.path.join(base, link))
        if os.path.commonpath([linked, dest_path]) != dest_path:
            raise UnsafeMember(f"{name!r}: link to {link!r}, outside {dest}")
    # TarInfo.replace() is 3.11.4+ too: copy and set. Owners: the extracting user (as data_filter).
    safe = copy.copy(member)
    safe.name = name
    safe.mode, safe.uid, safe.gid, safe.uname, safe.gname = mode, os.getuid(), os.getgid(), "", ""
    return safe


def extract(tarball: str, dest: str) -> None:
    """Extract `tarball` into `dest` (created), refusing what the "data" filter refuses."""
    Path(dest).mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:  # type: ignore[attr-defined,unused-ignore]
                raise UnsafeMember(str(exc)) from exc
            return
        members = [data_member(m, dest) for m in tar.getmembers()]
        tar.extractall(dest, members=members)  # every member checked above
