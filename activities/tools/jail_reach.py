"""Whether the jail's uid can reach the workspace, asked before the jail is probed.

A worker running as root runs its jail as another uid (`CAPSTAN_SANDBOX_UID`, default 65534:
see `capstan.activities.tools.jail`). That uid must be able to enter every directory on the
way to the workspace; a project under a `0700` home (`/root/project/.capstan/workspace`) is not
reachable, and bubblewrap only says `Permission denied`. This names the directory and the fix.

Reads file modes only (no ACLs, no supplementary groups: the jail is started without any);
never changes a permission.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from capstan.activities.tools.jail import SandboxSettings, root_jail_user

__all__ = ["blocking_directory", "workspace_block"]


def workspace_block(workspace: Path, settings: SandboxSettings) -> str | None:
    """Why the jail's uid cannot reach `workspace`, with the fix; None when it can, or when the
    worker is not root (then the jail runs as the worker's own uid), or when there is no
    bubblewrap (the probe says so)."""
    if os.geteuid() != 0 or shutil.which(settings.bwrap) is None:
        return None
    uid, gid = root_jail_user(settings)
    blocked = blocking_directory(workspace, uid, gid)
    if blocked is None:
        return None
    mode = stat.S_IMODE(blocked.stat().st_mode)
    return (
        f"the jail runs as uid {uid} (CAPSTAN_SANDBOX_UID), which cannot enter {blocked} "
        f"(mode {mode:04o}) on the way to the workspace {workspace}; fix: set CAPSTAN_WORKSPACE "
        f"to a directory uid {uid} can reach (e.g. /var/lib/capstan/workspace), "
        f"or `chmod o+x {blocked}`"
    )


def blocking_directory(path: Path, uid: int, gid: int) -> Path | None:
    """The first existing directory on the way to `path` (as written, and with its links
    resolved) that `uid`/`gid` may not enter; None when there is none."""
    seen: set[Path] = set()
    for route in (path.absolute(), path.resolve()):
        for directory in [*reversed(route.parents), route]:
            if directory in seen:
                continue
            seen.add(directory)
            try:
                info = directory.stat()
            except OSError:
                break  # not there yet: the worker creates it (as root, mode 0755 by umask)
            if not _may_enter(info, uid, gid):
                return directory
    return None


def _may_enter(info: os.stat_result, uid: int, gid: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)
