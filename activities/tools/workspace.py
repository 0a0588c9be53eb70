"""Confine file tools to the run's workspace directory, with no gap between check and use.

A path is never checked first and opened later: something else (another tool call, a process
in the workspace) could swap a directory for a symlink in between. Every access walks the
workspace-relative path one component at a time from a descriptor of the workspace root, each
directory opened with `O_NOFOLLOW | O_DIRECTORY` relative to its parent's descriptor and the
last component with `O_NOFOLLOW`. The object checked is the object used: a symlink anywhere on
the path, wherever it points and whenever it appears, makes the call fail instead of leading
out. Absolute paths, `~` and `..` are refused before any IO, and so are paths the OS itself
would refuse (more than `MAX_PATH_BYTES` bytes, a name over `MAX_NAME_BYTES`, or deeper than
`MAX_DEPTH`): walking one component at a time, nothing else would stop a path thousands of
directories deep. Names the worker keeps for itself at the top (`hidden`: the other tenants'
workspaces below the root) are neither listed nor reachable.

Refusals raise `WorkspaceError`; a missing file or a directory where a file should be raises
the usual `OSError` subclass. Either way the text names only the workspace-relative path the
model gave, never a host path.

Everything here blocks. A call on a small file or directory costs less than the thread hop
that would keep it off the event loop (`capstan.activities.inline`), so `read_text`,
`write_text` and `entries` take a bound (`at_most`): within it they answer, beyond it they stop
early and return None (having written nothing), and the caller makes the whole call again in a
thread.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, overload

__all__ = [
    "MAX_DEPTH",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "Entry",
    "Workspace",
    "WorkspaceError",
    "workspace_parts",
]

#: as the OS would: PATH_MAX (4096, with its NUL) and NAME_MAX; and a bound on nesting
MAX_PATH_BYTES = 4095
MAX_NAME_BYTES = 255
MAX_DEPTH = 64

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: opening a FIFO must not hang the worker; it is refused right after, by fstat.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class WorkspaceError(ValueError):
    """A path that would leave the workspace, or a file operation refused inside it."""


# The usual exception types, so the model recognises them, with texts that name no host path.
_REASONS: dict[int, tuple[type[Exception], str]] = {
    errno.ENOENT: (FileNotFoundError, "does not exist in the workspace"),
    errno.ENOTDIR: (NotADirectoryError, "is not a directory"),
    errno.EISDIR: (IsADirectoryError, "is a directory"),
    errno.EACCES: (PermissionError, "is not accessible (permission denied)"),
    errno.EPERM: (PermissionError, "is not accessible (operation not permitted)"),
    errno.ENXIO: (WorkspaceError, "is a special file, not a regular file"),  # FIFO, socket
}


@dataclass(frozen=True)
class Entry:
    """One directory entry, described without following it if it is a symlink."""

    name: str
    kind: Literal["dir", "file", "symlink", "other"]
    size: int = 0


def _shown(path: str) -> str:
    """`path` for an error text: quoted, and cut when long (the text stays one short line)."""
    return repr(path if len(path) <= 120 else path[:120] + "…")


def workspace_parts(path: str) -> tuple[str, ...]:
    """The components of a workspace-relative path; absolute paths, `~`, `..` and paths
    longer or deeper than the OS allows are refused."""
    if "\0" in path:
        raise WorkspaceError(f"path {_shown(path)} contains a NUL character")
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise WorkspaceError(
            f"path {_shown(path)} is too long ({size} bytes; at most {MAX_PATH_BYTES})"
        )
    candidate = PurePosixPath(path.replace("\\", "/"))
    if candidate.is_absolute() or path.startswith("~"):
        raise WorkspaceError(
            f"path {_shown(path)} is absolute; use a path relative to the workspace"
        )
    if ".." in candidate.parts:
        raise WorkspaceError(f"path {_shown(path)} leaves the workspace ('..' is not allowed)")
    parts = tuple(p for p in candidate.parts if p != ".")
    if len(parts) > MAX_DEPTH:
        raise WorkspaceError(
            f"path {_shown(path)} is too deep ({len(parts)} levels; at most {MAX_DEPTH})"
        )
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for p in parts):
        raise WorkspaceError(f"path {_shown(path)} has a name longer than {MAX_NAME_BYTES} bytes")
    return parts


@dataclass(frozen=True)
class Workspace:
    """File access below `root` that never follows a symlink; the top-level names in `hidden`
    do not exist for it."""

    root: Path
    hidden: frozenset[str] = frozenset()

    @overload
    def read_text(self, path: str, limit: int) -> str: ...
    @overload
    def read_text(self, path: str, limit: int, *, at_most: int) -> str | None: ...

    def read_text(self, path: str, limit: int, *, at_most: int | None = None) -> str | None:
        """Up to `limit` characters of a UTF-8 text file (undecodable bytes replaced); None,
        read nothing, when the file is larger than `at_most` bytes."""
        *parents, name = self._file_parts(path)
        with self._directory(path, parents, create=False) as parent:
            fd, found = _open_file(path, parent, [*parents, name], _READ_FLAGS)
            with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
                return None if at_most is not None and found.st_size > at_most else f.read(limit)

    @overload
    def write_text(self, path: str, content: str) -> int: ...
    @overload
    def write_text(self, path: str, content: str, *, at_most: int) -> int | None: ...

    def write_text(self, path: str, content: str, *, at_most: int | None = None) -> int | None:
        """Replace (or create) a UTF-8 text file, creating parent directories; bytes written.
        None, having written nothing, when the content or the file it replaces is larger than
        `at_most` bytes."""
        *parents, name = self._file_parts(path)
        if at_most is not None and len(content) > at_most:  # at least a byte a character
            return None
        data = content.encode("utf-8")
        if at_most is not None and len(data) > at_most:
            return None
        with self._directory(path, parents, create=True) as parent:
            fd, found = _open_file(path, parent, [*parents, name], _WRITE_FLAGS, mode=0o666)
            with os.fdopen(fd, "wb") as f:
                if found.st_nlink > 1:  # another name, maybe outside, shares this file
                    raise WorkspaceError(
                        f"path {_shown(path)} is a hard link; refusing to write to it"
                    )
                if at_most is not None and found.st_size > at_most:
                    return None
                os.ftruncate(fd, 0)
                f.write(data)
        return len(data)

    @overload
    def entries(self, path: str) -> list[Entry]: ...
    @overload
    def entries(self, path: str, *, at_most: int) -> list[Entry] | None: ...

    def entries(self, path: str, *, at_most: int | None = None) -> list[Entry] | None:
        """The entries of a directory; symlinks are reported as such, never followed. None when
        it has more than `at_most` (having looked at `at_most` of them and one more name)."""
        parts = self._parts(path)
        with self._directory(path, parts, create=False) as directory, os.scandir(directory) as it:
            listed = it if at_most is None else itertools.islice(it, at_most)
            found = [e for e in map(_entry, listed) if e is not None]
            if at_most is not None and next(it, None) is not None:
                return None
        return [e for e in found if e.name not in self.hidden] if not parts else found

    def _parts(self, path: str) -> tuple[str, ...]:
        parts = workspace_parts(path)
        if parts and parts[0] in self.hidden:
            raise FileNotFoundError(f"path {_shown(path)} does not exist in the workspace")
        return parts

    def _file_parts(self, path: str) -> tuple[str, ...]:
        parts = self._parts(path)
        if not parts:
            raise WorkspaceError(f"path {_shown(path)} is the workspace directory, not a file")
        return parts

    @contextlib.contextmanager
    def _directory(self, path: str, parts: Sequence[str], *, create: bool) -> Iterator[int]:
        """A descriptor of the directory `parts` leads to, walked without following links."""
        try:
            fd = os.open(self.root, _ROOT_FLAGS)
        except OSError:
            raise WorkspaceError("the workspace directory is not available") from None
        try:
            for depth in range(len(parts)):
                child = _open_dir(path, fd, parts[: depth + 1], create=create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)


def _open_dir(path: str, parent: int, shown: Sequence[str], *, create: bool) -> int:
    name = shown[-1]
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if not (create and exc.errno == errno.ENOENT):
            raise _refusal(path, parent, shown, exc) from None
    try:
        with contextlib.suppress(FileExistsError):  # a parallel call may have made it first
            os.mkdir(name, 0o777, dir_fd=parent)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refusal(path, parent, shown, exc) from None


def _open_file(
    path: str, parent: int, shown: Sequence[str], flags: int, mode: int = 0
) -> tuple[int, os.stat_result]:
    """A descriptor of a regular file and its status; anything else is refused."""
    try:
        fd = os.open(shown[-1], flags, mode, dir_fd=parent)
    except OSError as exc:
        raise _refusal(path, parent, shown, exc) from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(found.st_mode) else "a special file"
        raise WorkspaceError(f"path {_shown(path)} is {kind}, not a regular file")
    return fd, found


def _refusal(path: str, parent: int, shown: Sequence[str], exc: OSError) -> Exception:
    """Say why `shown` (the first components of `path`) could not be opened; no host path."""
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(shown[-1], dir_fd=parent, follow_symlinks=False).st_mode):
            return WorkspaceError(
                f"path {_shown(path)} goes through a symlink ({'/'.join(shown)!r}); "
                "the file tools do not follow symlinks in the workspace"
            )
    default = (OSError, f"cannot be opened ({exc.strerror})")
    kind, reason = _REASONS.get(exc.errno or 0, default)
    where = "" if tuple(shown) == workspace_parts(path) else f": {'/'.join(shown)!r}"
    return kind(f"path {_shown(path)}{where} {reason}")


def _entry(item: os.DirEntry[str]) -> Entry | None:
    try:
        found = item.stat(follow_symlinks=False)
    except FileNotFoundError:  # removed while listing
        return None
    if stat.S_ISLNK(found.st_mode):
        return Entry(item.name, "symlink")
    if stat.S_ISDIR(found.st_mode):
        return Entry(item.name, "dir")
    if stat.S_ISREG(found.st_mode):
        return Entry(item.name, "file", found.st_size)
    return Entry(item.name, "other")
