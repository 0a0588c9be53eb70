"""Helpers for the sandbox tests: a workspace the jail can reach, the jail, process markers.

A worker running as root runs the jail as uid 65534 (Linux does not apply the process limit to
root), so the jail's workspace must be reachable and writable by that uid: pytest's own
temporary directories are private to root, so these workspaces live in a directory of their own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.activities.tools.jail import NOBODY, Jail, JailUnavailable, SandboxSettings, probe_jail

__all__ = ["jail_for", "jail_workspace", "live_with_marker", "marker", "needs_jail"]


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    """A fresh directory the jail's uid owns, under a world-traversable parent, then removed."""
    root = Path(tempfile.mkdtemp(prefix="capstan-sandbox-"))
    try:
        root.chmod(0o755)
        workspace = root / "workspace"
        workspace.mkdir()
        if os.geteuid() == 0:
            os.chown(workspace, NOBODY, NOBODY)
        yield workspace
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _probe() -> Jail | JailUnavailable:
    with _workspace() as where:
        return probe_jail(SandboxSettings(), where)


@functools.cache
def _unavailable() -> str | None:
    found = _probe()
    return found.reason if isinstance(found, JailUnavailable) else None


needs_jail = pytest.mark.skipif(
    _unavailable() is not None,
    reason=f"no bubblewrap jail here: {_unavailable()} (`make system-deps` installs bubblewrap)",
)


@pytest.fixture
def jail_workspace() -> Iterator[Path]:
    """A workspace the jail can write (its parent holds files the jail must not see)."""
    with _workspace() as workspace:
        yield workspace


def jail_for(workspace: Path, hidden: tuple[Path, ...] = ()) -> Jail:
    found = probe_jail(SandboxSettings(), workspace, hidden)
    assert isinstance(found, Jail), found
    return found


def marker() -> str:
    """A unique word to find a test's jailed processes by their command line."""
    return f"capstan-marker-{uuid.uuid4().hex[:12]}"


def live_with_marker(word: str) -> list[int]:
    """Pids of live (not zombie) host processes whose command line holds `word`."""
    found = []
    needle = word.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            if needle in (entry / "cmdline").read_bytes() and not _zombie(entry):
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def _zombie(entry: Path) -> bool:
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2] == "Z"
