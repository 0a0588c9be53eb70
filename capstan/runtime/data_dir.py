"""Which data directory (Temporal's database, blobs, workspace, logs) a command uses.

In this order, the first that applies:

1. `CAPSTAN_DATA_DIR`, when set (relative to the working directory);
2. the project's: `<project>/.capstan`, where the project is the nearest directory, from the
   working directory up, that holds a `.capstan/` directory, a `capstan.toml` file or a
   `pyproject.toml` with a `[tool.capstan]` table;
3. the user's: `$XDG_DATA_HOME/capstan`, by default `~/.local/share/capstan`.

So `capstan audit` run from a subdirectory of the project, or from anywhere for a user without
a project, finds the blobs the worker wrote. The result is absolute, so processes started with
another working directory share it. Finding it only reads: nothing is created here.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DATA_DIR_NAME", "find_project", "resolve_data_dir"]

DATA_DIR_NAME = ".capstan"


def resolve_data_dir(env: Mapping[str, str], cwd: Path) -> Path:
    """The data directory for a process with environment `env` working in `cwd`."""
    explicit = env.get("CAPSTAN_DATA_DIR")
    if explicit:
        return (cwd / Path(explicit).expanduser()).absolute()
    project = find_project(cwd)
    if project is not None:
        return project / DATA_DIR_NAME
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/share")
    return (Path(base).expanduser() / "capstan").absolute()


def find_project(start: Path) -> Path | None:
    """The nearest directory from `start` up that is a Capstan project, if any."""
    start = start.absolute()
    for folder in (start, *start.parents):
        if (folder / DATA_DIR_NAME).is_dir() or (folder / "capstan.toml").is_file():
            return folder
        if _declares_capstan(folder / "pyproject.toml"):
            return folder
    return None


def _declares_capstan(pyproject: Path) -> bool:
    """True when the file exists and has a `[tool.capstan]` table."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    tool = data.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("capstan"), dict)
