"""The tool result budget: how much of a tool's output the model sees.

Stage 1 caps lines and bytes (cut on a UTF-8 character boundary); stage 2 caps tokens (by
default 30,000 and at most 40% of the model's window). The full output stays in the blob store;
a cut observation ends with a note naming its ref and how to page through the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capstan.activities.tokens import encoding
from capstan.core.tooling import READ_RESULT_TOOL

__all__ = ["ResultBudget", "apply_budget"]


@dataclass(frozen=True)
class ResultBudget:
    max_lines: int = 2_000
    max_bytes: int = 100_000
    max_tokens: int = 30_000
    max_chars: int | None = None  # the run's `observation_max_chars`


def _cut_tokens(text: str, limit: int) -> str:
    encoder = encoding()  # one encoder for both halves, even if an idle release comes between
    tokens = encoder.encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return encoder.decode_bytes(tokens[:limit]).decode("utf-8", errors="ignore")


def apply_budget(
    text: str,
    ref: str | None,
    budget: ResultBudget,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """`text` cut to the budget, with a paging note when anything was cut."""
    kept = text
    lines = kept.split("\n")
    if len(lines) > budget.max_lines:
        kept = "\n".join(lines[: budget.max_lines])
    data = kept.encode("utf-8")
    if len(data) > budget.max_bytes:
        kept = data[: budget.max_bytes].decode("utf-8", errors="ignore")
    if budget.max_chars is not None and len(kept) > budget.max_chars:
        kept = kept[: budget.max_chars]
    if len(kept) > budget.max_tokens and (count_tokens or _count)(kept) > budget.max_tokens:
        kept = _cut_tokens(kept, budget.max_tokens)
    if kept == text:
        return text
    where = f"ref={ref!r}" if ref else "(the full output was not stored)"
    return (
        f"{kept}\n[truncated: showing {len(kept)} of {len(text)} characters. Read the rest with "
        f"{READ_RESULT_TOOL}({where}, offset={len(kept)}).]"
    )


def _count(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))
