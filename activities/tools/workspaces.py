"""Each run's workspace directory: the worker's root, or its tenant's (thread's) own below it.

A run's workspace key (`RunSpec.workspace`, set by Capstan only: `capstan.core.tenants`) names
the directory `<root>/.capstan-tenants/<part>/.../<part>/.workspace`; no key is the root itself
(the `default` tenant's runs, as before). The directories on the way are the worker's, mode
0711 (the jail's uid may pass through, not list or change them); only the leaf is a workspace,
mode 0700 and, on a root worker, owned by the jail's uid (`CAPSTAN_SANDBOX_UID`), which must
be able to enter and write it. So no run can change a directory on the way to another run's
workspace: the tenants directory is hidden from the root's runs (the file tools' `hidden`, the
jail's masks), and a leaf holds nothing but its own files.

Every step is opened with `O_NOFOLLOW | O_DIRECTORY` from its parent's descriptor and checked:
a symlink, or a directory on the way that is not the worker's or that others may write, fails
the call with a one-line reason instead of leading elsewhere. Texts name no host path. Blocks:
call it through `asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path

from capstan.activities.tools.jail import NOBODY, SandboxSettings
from capstan.activities.tools.workspace import WorkspaceError
from capstan.core.tenants import TENANTS_DIR, WORKSPACE_LEAF, TenantError, workspace_parts

__all__ = ["jail_owner", "run_workspace", "tenants_root"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PASSAGE_MODE = 0o711
_LEAF_MODE = 0o700


def jail_owner(env: Mapping[str, str]) -> tuple[int, int] | None:
    """The uid/gid a root worker's jail runs as (so it owns the leaves), or None: a worker
    that is not root runs its jail as itself."""
    if os.geteuid() != 0:
        return None
    uid = SandboxSettings.from_env(env).uid or NOBODY
    try:
        return uid, pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid, uid


def tenants_root(root: Path) -> Path:
    """`<root>/.capstan-tenants`, made if missing (before the jail is probed, so the root's
    jail masks it)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(_step(fd, TENANTS_DIR, None))
    finally:
        os.close(fd)
    return root / TENANTS_DIR


def run_workspace(root: Path, key: str | None, owner: tuple[int, int] | None) -> Path:
    """The directory of the workspace `key` names below `root`, made if missing; `owner`: the
    leaf's uid/gid (`jail_owner`). TenantError / WorkspaceError say why it cannot be used."""
    if key is None:
        return root
    chain = (TENANTS_DIR, *workspace_parts(key), WORKSPACE_LEAF)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise WorkspaceError("the workspace directory is not available") from None
    try:
        for depth, name in enumerate(chain):
            leaf = depth == len(chain) - 1
            child = _step(fd, name, owner if leaf else None, leaf=leaf)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return root.joinpath(*chain)


def _step(parent: int, name: str, owner: tuple[int, int] | None, *, leaf: bool = False) -> int:
    """A descriptor of the directory `name` below `parent`, made (with its mode) if missing,
    and checked to be what it must be."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise _unusable(name, "is not a directory (a symlink?)") from None
        with contextlib.suppress(FileExistsError):  # a parallel call made it first
            os.mkdir(name, _LEAF_MODE if leaf else _PASSAGE_MODE, dir_fd=parent)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            raise _unusable(name, "could not be made") from None
    try:
        _settle(fd, name, owner, leaf=leaf)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _settle(fd: int, name: str, owner: tuple[int, int] | None, *, leaf: bool) -> None:
    """Give a leaf its owner and mode; refuse a passage that is not the worker's alone."""
    found = os.fstat(fd)
    if leaf:
        if owner is not None and (found.st_uid, found.st_gid) != owner:
            os.fchown(fd, *owner)
        if stat.S_IMODE(found.st_mode) != _LEAF_MODE:
            os.fchmod(fd, _LEAF_MODE)
        return
    if found.st_uid != os.geteuid() or found.st_mode & 0o022:
        raise _unusable(name, "is not the worker's own directory")
    if stat.S_IMODE(found.st_mode) != _PASSAGE_MODE:
        os.fchmod(fd, _PASSAGE_MODE)


def _unusable(name: str, why: str) -> TenantError:
    return TenantError(f"the run's workspace cannot be used: {name!r} {why}")
