"""What a provider states of its tokens-per-minute budget, read from a reply's headers.

OpenAI sends `x-ratelimit-remaining-tokens` and `x-ratelimit-reset-tokens` (a Go-style
duration: `6m0s`, `1.5s`, `20ms`); Anthropic sends `anthropic-ratelimit-tokens-remaining` (or
its input/output variants) and `anthropic-ratelimit-tokens-reset` (an RFC 3339 time). When the
budget left is less than a call takes, the worker slows the profile's queue for the whole fleet
until the budget resets, as it does for a 429 (`capstan.activities.model_queues.Governor`): a
provider's stated tokens per minute are kept without the fleet first running into them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

__all__ = ["TokenBudget", "token_budget"]

#: the longest reset honoured (a provider's minute, with room)
MAX_RESET = 120.0
_DURATION = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_REMAINING = (
    "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-remaining",
)
_RESET = (
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
)


@dataclass(frozen=True)
class TokenBudget:
    """Tokens the provider will still take, and in how many seconds it refills."""

    remaining: int
    reset_seconds: float


def token_budget(
    headers: Mapping[str, str], now: Callable[[], datetime] | None = None
) -> TokenBudget | None:
    """The budget a reply's `headers` state (lower-case names), or None when they state none
    or state it in a shape this does not read."""
    remaining = next((headers[h] for h in _REMAINING if h in headers), None)
    reset = next((headers[h] for h in _RESET if h in headers), None)
    if remaining is None or reset is None:
        return None
    try:
        left = int(float(remaining))
    except ValueError:
        return None
    seconds = _seconds(reset.strip(), now)
    if seconds is None:
        return None
    return TokenBudget(max(left, 0), min(max(seconds, 0.0), MAX_RESET))


def _seconds(text: str, now: Callable[[], datetime] | None) -> float | None:
    """A Go-style duration (`1m30s`, `250ms`) or an RFC 3339 time, as seconds from now."""
    parts = list(_DURATION.finditer(text))
    if parts and "".join(p.group(0) for p in parts) == text:
        return sum(float(p["n"]) * _UNITS[p["unit"]] for p in parts)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    current = now() if now is not None else datetime.now(when.tzinfo)
    return (when - current).total_seconds()
