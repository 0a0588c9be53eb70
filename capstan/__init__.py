"""Capstan: a durable ReAct agent worker on Temporal.

The public API, re-exported here (loaded on first use, so importing one layer never drags in
the others)::

    from capstan import tool, ToolContext, RunSpec, CapstanClient

The package shows its layers (import-linter checks the direction in `make lint`):

- `capstan.core`: the pure loop and every type it folds (no IO, clock, environment, Temporal);
- `capstan.workflows`: the Temporal interpreter of the loop (deterministic);
- `capstan.activities`: providers, tools, compaction, token counting (all the IO of a run);
- `capstan.runtime`: settings, the blob store, the embedded servers, telemetry;
- `capstan.client`, `capstan.audit`, `capstan.cli`: Temporal clients that start, steer and read
  runs; they never import worker internals;
- `capstan.worker`: the composition root (`worker.py` in the repository).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

# httpx imports its own command-line tool (rich, click and pygments) whenever those happen to be
# installed, which costs a worker's start ~0.2 G instructions (an eighth of a bare Temporal
# import; `bench/worker_start.py`) for a tool Capstan never runs. With the module marked absent,
# httpx defines its stub `main` instead; the `httpx` command itself runs in its own process.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

if TYPE_CHECKING:
    from capstan.activities.tools.registry import ToolContext, tool
    from capstan.client.runs import CapstanClient
    from capstan.core.errors import CapstanError
    from capstan.core.spec import FinishMode, RunResult, RunSpec, TerminalReason

#: Public name -> the module that defines it.
_EXPORTS = {
    "CapstanClient": "capstan.client.runs",
    "CapstanError": "capstan.core.errors",
    "FinishMode": "capstan.core.spec",
    "RunResult": "capstan.core.spec",
    "RunSpec": "capstan.core.spec",
    "TerminalReason": "capstan.core.spec",
    "ToolContext": "capstan.activities.tools.registry",
    "tool": "capstan.activities.tools.registry",
}

__all__ = [
    "CapstanClient",
    "CapstanError",
    "FinishMode",
    "RunResult",
    "RunSpec",
    "TerminalReason",
    "ToolContext",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'capstan' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
