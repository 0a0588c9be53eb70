"""Confine file tools to the run's workspace directory.

Absolute paths, `..` components and symlinks that lead outside are refused with a clear error,
which the model sees as an observation.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

__all__ = ["WorkspaceError", "inside_workspace"]


class WorkspaceError(ValueError):
    """A path that would leave the workspace."""


def inside_workspace(workspace: Path, path: str) -> Path:
    """The real path of `path` within `workspace`, or WorkspaceError."""
    candidate = PurePosixPath(path.replace("\\", "/"))
    if candidate.is_absolute() or path.startswith("~"):
        raise WorkspaceError(f"path {path!r} is absolute; use a path relative to the workspace")
    if ".." in candidate.parts:
        raise WorkspaceError(f"path {path!r} leaves the workspace ('..' is not allowed)")
    root = workspace.resolve()
    resolved = (root / candidate).resolve()
    if not resolved.is_relative_to(root):
        raise WorkspaceError(f"path {path!r} leads outside the workspace through a symlink")
    return resolved
