"""What a pending `write_file` would change: its content, and a diff against the file now.

Read-only, and only inside the workspace this server is configured with (the worker's, on one
machine or a shared volume): the path comes from a model, so it is resolved and refused when
it leads outside (`..`, absolute paths, symlinks out). Large or binary files are named, not read.

The workspace is also where jailed commands write, so the file can change between any check and
the read (a FIFO raced in at the path once blocked the read, the event loop with it, and every
request of the server). So the file is opened without blocking and without following a final
symlink, and judged by what was opened (`fstat`, and where the descriptor points): only a
regular file inside the workspace is read, at most `MAX_PREVIEW_BYTES + 1` bytes. And the work
runs off the event loop, in a few threads of its own, bounded in time (`bounded`): a preview
that does not answer in time becomes a note, and no other request waits for it.

Must never write, follow a link out of the workspace, or read more than the bound.
"""

from __future__ import annotations

import asyncio
import difflib
import errno
import functools
import json
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from capstan.core.tenants import TENANTS_DIR

__all__ = ["MAX_PREVIEW_BYTES", "PREVIEW_SECONDS", "WritePreview", "bounded", "write_preview"]

MAX_PREVIEW_BYTES = 512 * 1024
#: the longest a preview (or the read of its arguments) may take before it becomes a note
PREVIEW_SECONDS = 2.0
WRITE_TOOLS = frozenset({"write_file"})
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_THREADS = 4
T = TypeVar("T")


@dataclass(frozen=True)
class WritePreview:
    path: str
    content: str
    #: unified diff lines against the current file, or None with `note` saying why
    diff: list[str] | None
    note: str = ""


@functools.cache
def _threads() -> ThreadPoolExecutor:
    """The preview threads, made on first use (none at import)."""
    return ThreadPoolExecutor(_THREADS, thread_name_prefix="capstan-preview")


async def bounded(call: Callable[[], T], seconds: float = PREVIEW_SECONDS) -> T | None:
    """`call()` in the preview threads; None when it has not answered within `seconds` (the
    thread finishes on its own; a stuck one holds one of the few preview threads, never the
    event loop nor the threads the rest of the server uses)."""
    future = asyncio.get_running_loop().run_in_executor(_threads(), call)
    try:
        return await asyncio.wait_for(future, seconds)
    except TimeoutError:
        return None


def _inside(fd: int, root: Path) -> bool:
    """The opened file is inside `root` (where the descriptor points, after every swap)."""
    link = Path(f"/proc/self/fd/{fd}")
    try:
        return Path(os.readlink(link)).is_relative_to(root)
    except OSError:
        return True  # no /proc: the resolved path was checked before the open


def _read_bounded(fd: int) -> bytes:
    chunks, size = [], 0
    while size <= MAX_PREVIEW_BYTES:
        chunk = os.read(fd, MAX_PREVIEW_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _opened(fd: int, root: Path) -> tuple[str | None, str]:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return None, "the path is not a regular file"
    if not _inside(fd, root):
        return None, "the path leads outside the workspace"
    too_large = f"the current file is larger than {MAX_PREVIEW_BYTES // 1024} KiB"
    if info.st_size > MAX_PREVIEW_BYTES:
        return None, too_large
    data = _read_bounded(fd)
    if len(data) > MAX_PREVIEW_BYTES:
        return None, too_large
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "the current file is not UTF-8 text"


def _current(workspace: Path, path: str) -> tuple[str | None, str]:
    """(current text, note): None with a note when it cannot or must not be read."""
    root = workspace.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None, "the path cannot be resolved"
    # below the root: the other tenants' workspaces (capstan.core.tenants), not this run's
    if not target.is_relative_to(root) or target.is_relative_to(root / TENANTS_DIR):
        return None, "the path leads outside the workspace"
    try:
        fd = os.open(target, _OPEN_FLAGS)
    except FileNotFoundError:
        return "", "a new file"
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink swapped in after the path was resolved
            return None, "the path is a symbolic link"
        return None, f"the current file cannot be read ({exc.strerror})"
    try:
        return _opened(fd, root)
    except OSError as exc:
        return None, f"the current file cannot be read ({exc.strerror})"
    finally:
        os.close(fd)


def write_preview(tool: str, arguments: str, workspace: Path | None) -> WritePreview | None:
    """The preview of a file write, or None for other tools and unreadable arguments. Blocking
    (file IO, a diff): call it through `bounded`."""
    if tool not in WRITE_TOOLS:
        return None
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    path, content = (value.get("path"), value.get("content")) if isinstance(value, dict) else (0, 0)
    if not isinstance(path, str) or not isinstance(content, str):
        return None
    if workspace is None:
        return WritePreview(path, content, None, "no workspace is configured for this server")
    current, note = _current(workspace, path)
    if current is None:
        return WritePreview(path, content, None, note)
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        content.splitlines(keepends=True),
        fromfile=f"{path} (now)",
        tofile=f"{path} (after)",
    )
    lines = [line.rstrip("\n") for line in diff]
    return WritePreview(path, content, lines, note or ("no change" if not lines else ""))
