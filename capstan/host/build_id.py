"""The worker's build id: Capstan's version and a hash of the code that decides what a run does
(the pure core and the workflow), what Temporal's default build id stands for, at a fraction of
its cost (the SDK's default hashes every loaded module, ~0.6 s at start)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

__all__ = ["build_id"]

#: the packages whose code decides a run's commands
_DECIDING = ("capstan.workflows", "capstan.core")


def build_id() -> str:
    digest = hashlib.sha256()
    for package in _DECIDING:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None, package
        folder = Path(next(iter(spec.submodule_search_locations)))
        for source in sorted(folder.glob("*.py")):
            digest.update(source.name.encode() + source.read_bytes())
    return f"capstan-{importlib.metadata.version('capstan')}-{digest.hexdigest()[:12]}"
