"""How audit values read to people: UTC times, human durations, pretty arguments, clipped text.

Pure formatting for the audit renderers. It never escapes (the HTML page escapes everything it
writes, Markdown writes text as is) and never changes what a record says: a clipped text says
how much it left out, and the JSONL trail always holds the whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "Clipped",
    "clip",
    "count",
    "duration",
    "money",
    "parse_arguments",
    "parse_time",
    "pretty_json",
    "utc",
    "utc_clock",
]


def parse_time(iso: str | None) -> datetime | None:
    """A record's ISO time as an aware datetime; histories record naive times in UTC."""
    if not iso:
        return None
    try:
        at = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def utc(iso: str | None) -> str:
    """`2026-11-30 20:33:50 UTC` (the zone always written out)."""
    at = parse_time(iso)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else (iso or "")


def utc_clock(iso: str | None) -> str:
    """`20:33:50.028 UTC`: the time of day to the millisecond, for a timeline within a day."""
    at = parse_time(iso)
    return at.strftime("%H:%M:%S.") + f"{at.microsecond // 1000:03d} UTC" if at else (iso or "")


def duration(seconds: float | None) -> str:
    """A duration as people say it: `340 ms`, `4.2 s`, `1 m 12 s`, `2 h 5 m`, `3 d 4 h`."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    total = int(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} m"
    if minutes:
        return f"{minutes} m {secs} s"
    return f"{secs} s"


def count(n: int | float | None) -> str:
    return "—" if n is None else f"{n:,}"


def money(usd: float | None) -> str:
    if usd is None:
        return "—"
    return f"${usd:,.4f}" if 0 < usd < 1 else f"${usd:,.2f}"


def parse_arguments(text: str | None) -> Any:
    """Tool arguments as the model sent them (a JSON string), parsed; the text itself when it
    is not JSON (a model can send anything, and the audit shows what it sent)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def pretty_json(value: Any) -> str:
    """Indented JSON for values, a string as itself (so newlines in it read as lines)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@dataclass(frozen=True)
class Clipped:
    """A text cut to a size a page can carry: its head, its tail, and what was left out."""

    head: str
    tail: str
    omitted: int
    total: int
    lines: int

    @property
    def text(self) -> str:
        if not self.omitted:
            return self.head
        return f"{self.head}\n[… {self.omitted:,} characters not shown …]\n{self.tail}"

    @property
    def first_line(self) -> str:
        flat = " ".join(self.head[:400].split())
        return flat if len(flat) <= 100 else flat[:99] + "…"


def clip(text: str, limit: int) -> Clipped:
    """Keep the first three quarters of `limit` and the last quarter: errors and results
    usually sit at the end of a long output, what it is about at its start."""
    lines = text.count("\n") + 1 if text else 0
    if len(text) <= limit:
        return Clipped(text, "", 0, len(text), lines)
    head, tail = limit * 3 // 4, limit // 4
    return Clipped(text[:head], text[-tail:], len(text) - head - tail, len(text), lines)
