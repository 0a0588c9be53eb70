"""Capstan: a durable ReAct agent worker on Temporal.

The package root holds the pure core (types, the loop) plus the client-side edges
(`client`, `cli`, `config`, `embedded`, `blobstore`). The pure modules never do IO and
never read the clock, the environment or a random source; ruff's banned-API rule enforces it.
"""

from capstan.spec import FinishMode, RunResult, RunSpec, TerminalReason

__all__ = ["FinishMode", "RunResult", "RunSpec", "TerminalReason"]
