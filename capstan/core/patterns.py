"""Regular expressions from untrusted places, run in linear time: RE2, never Python's `re`.

Patterns arrive from callers (`RunSpec.tool_policy[*].deny_arguments`), from the worker's policy
file, from the MCP file and from MCP servers' tool schemas (`pattern`, `patternProperties`). They
are matched in workflow code (the gate, update validators), where a backtracking engine lets one
pattern such as `^(a|a)+$` stall the worker for minutes on a short string, and where a wall-clock
bound is not allowed (it is not deterministic). RE2 (Google's, PyPI `google-re2`) matches in time
linear in the text, always; in exchange it has no backreferences and no lookaround. A pattern it
cannot compile is refused with one line (`pattern_problem`) where it enters: spec validation,
worker start, MCP listing (a note). Pure: no IO, no clock; the compile cache only saves work.

What this module must never do: fall back to Python's `re`, or bound matching by time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Protocol

import re2
from pydantic import AfterValidator

__all__ = [
    "MAX_PATTERN_CHARS",
    "Compiled",
    "Pattern",
    "PatternError",
    "compile_pattern",
    "pattern_problem",
    "search",
]

#: The longest pattern accepted. RE2's memory per pattern is bounded too (`_MAX_MEM`): a pattern
#: whose program needs more (`a{1000}{1000}`) is refused, not compiled.
MAX_PATTERN_CHARS = 1000
_MAX_MEM = 1 << 20
_CACHE = 128
_SYNTAX_HINT = " (patterns run in RE2: no backreferences, no lookaround, \\z instead of \\Z)"


class Compiled(Protocol):
    """A compiled RE2 pattern (the part of `re2`'s API used here)."""

    def search(self, text: str) -> object | None: ...


class PatternError(ValueError):
    """A pattern that cannot be used; the message is one line naming the pattern."""


def _options() -> object:
    options = re2.Options()
    options.max_mem = _MAX_MEM
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    return options


@lru_cache(maxsize=_CACHE)
def _compiled(pattern: str) -> Compiled | str:
    """The compiled pattern, or why it cannot be (cached either way: both are deterministic)."""
    shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"pattern {shown!r} is longer than {MAX_PATTERN_CHARS} characters"
    try:
        compiled: Compiled = re2.compile(pattern, _options())
        return compiled
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        reason = " ".join(str(reason).split())
        hint = "" if "too large" in reason else _SYNTAX_HINT
        return f"pattern {shown!r} is refused: {reason}{hint}"


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is refused (one line), or None when it compiles in RE2."""
    found = _compiled(pattern)
    return found if isinstance(found, str) else None


def compile_pattern(pattern: str) -> Compiled:
    """`pattern` compiled in RE2 (cached); `PatternError` when it cannot be."""
    found = _compiled(pattern)
    if isinstance(found, str):
        raise PatternError(found)
    return found


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (Python's `re.search`), in linear time."""
    return compile_pattern(pattern).search(text) is not None


def _usable(pattern: str) -> str:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise ValueError(problem)
    return pattern


#: A pattern field of a model (`ToolRule.deny_arguments`): refused at validation unless RE2
#: compiles it, so a spec, a policy file or an MCP file with one fails where it enters.
Pattern = Annotated[str, AfterValidator(_usable)]
