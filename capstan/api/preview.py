"""What a pending `write_file` would change: its content, and a diff against the file now.

Read-only, and only inside the workspace this server is configured with (the worker's, on one
machine or a shared volume): the path comes from a model, so it is resolved and refused when
it leads outside (`..`, absolute paths, symlinks out). Large or binary files are named, not read.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_PREVIEW_BYTES", "WritePreview", "write_preview"]

MAX_PREVIEW_BYTES = 512 * 1024
WRITE_TOOLS = frozenset({"write_file"})


@dataclass(frozen=True)
class WritePreview:
    path: str
    content: str
    #: unified diff lines against the current file, or None with `note` saying why
    diff: list[str] | None
    note: str = ""


def _current(workspace: Path, path: str) -> tuple[str | None, str]:
    """(current text, note): None with a note when it cannot or must not be read."""
    root = workspace.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError):
        return None, "the path cannot be resolved"
    if not target.is_relative_to(root):
        return None, "the path leads outside the workspace"
    if not target.exists():
        return "", "a new file"
    if not target.is_file():
        return None, "the path is not a regular file"
    if target.stat().st_size > MAX_PREVIEW_BYTES:
        return None, f"the current file is larger than {MAX_PREVIEW_BYTES // 1024} KiB"
    try:
        return target.read_text(encoding="utf-8"), ""
    except UnicodeDecodeError:
        return None, "the current file is not UTF-8 text"
    except OSError as exc:
        return None, f"the current file cannot be read ({exc.strerror})"


def write_preview(tool: str, arguments: str, workspace: Path | None) -> WritePreview | None:
    """The preview of a file write, or None for other tools and unreadable arguments."""
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
