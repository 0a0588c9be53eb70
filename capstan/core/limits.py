"""What keeps a run inside Temporal's limits whatever its clients send. Pure.

Temporal fails a workflow task whose payload passes 2 MB (the run is then stuck until
terminated), refuses signals after 10,000 and updates after 2,000 per execution, and ends an
execution at 51,200 events or 50 MB of history. No input a client can send may bring a run
there, so:

- **Inputs are small.** Text in an input travels inline only up to `INPUT_TEXT_BYTES`; above
  that the client stores it in the blob store and sends a `BlobRef` (the Capstan client does so
  itself). Ids, identities, request ids and hashes are short. A larger input is refused: by the
  update validator with a clear error, by the signal handler with a diagnostic cut to a preview.
- **What the state holds is bounded.** Live messages wait in an inbox of at most
  `INBOX_MESSAGES` (more are refused until the model has read them: send them again later); a
  run remembers `APPLIED_IDS` ids, 8 bytes each (`capstan.core.idset`). Worst case, a carried
  state holds ~0.5 MB of inbox, ~0.35 MB of ids and ~0.6 MB of approval records.
- **An execution stays short.** A waiting run continues as new before Temporal's limits are
  near (`must_continue`): the interpreter measures its history (`HistoryGauge`) and the loop
  decides. Continuing every 1,000 signals rather than near 10,000 also keeps a replay short:
  after any failed workflow task the worker replays the execution from its start.

What no workflow code can prevent: a client that sends faster than the run's workflow tasks
complete makes the server fail the task in flight once 100 signals are buffered
(`FORCE_CLOSE_COMMAND`), and the next task starts with a replay; while that lasts nothing
completes, so no continue-as-new either. When the sender pauses, the run takes everything that
arrived in one activation (measured: ~80 µs a signal in the sandbox, 10,000 in under a second,
inside the 2 s deadlock limit) and continues as new.
"""

from __future__ import annotations

from dataclasses import dataclass

from capstan.core.content import INLINE_LIMIT_BYTES, PREVIEW_CHARS, BlobRef, Text, preview_of
from capstan.core.tool_names import READ_RESULT_TOOL

__all__ = [
    "APPLIED_IDS",
    "INBOX_MESSAGES",
    "INPUT_NAME_CHARS",
    "INPUT_TEXT_BYTES",
    "HistoryGauge",
    "crowded",
    "describe",
    "must_continue",
    "text_problem",
]

#: Inline text in one input; anything larger goes to the blob store as a ref.
INPUT_TEXT_BYTES = INLINE_LIMIT_BYTES
#: Ids, identities, request ids, argument hashes.
INPUT_NAME_CHARS = 256
#: A ref's preview as a client may send it (the store writes `PREVIEW_CHARS`).
REF_PREVIEW_CHARS = 2 * PREVIEW_CHARS
#: Live messages waiting for the model (each at most `INPUT_TEXT_BYTES` inline).
INBOX_MESSAGES = 200
#: Ids a run remembers (8 bytes each); past this only `cancel` is still accepted.
APPLIED_IDS = 32_768

#: A run continues as new at the first of these (Temporal's own limit in brackets).
SIGNALS_BEFORE_CONTINUE = 1_000  # (10,000 signals per execution)
UPDATES_BEFORE_CONTINUE = 1_000  # (2,000 updates per execution)
EVENTS_BEFORE_CONTINUE = 20_000  # (51,200 events)
BYTES_BEFORE_CONTINUE = 20 * 1024 * 1024  # (50 MB)
#: Below this many events Temporal's own suggestion is not taken while waiting: a fresh
#: execution whose carried state alone is large must not continue as new again at once.
EVENTS_BEFORE_SUGGESTION = 100


@dataclass(frozen=True)
class HistoryGauge:
    """How full this execution's history is, as the interpreter measured it."""

    events: int = 0
    size_bytes: int = 0
    signals: int = 0
    updates: int = 0
    suggested: bool = False  # Temporal's `is_continue_as_new_suggested`


def crowded(gauge: HistoryGauge | None) -> str | None:
    """Which of Temporal's limits this execution nears, or None. A run continues as new on it
    whatever it is doing at its next boundary."""
    if gauge is None:
        return None
    if gauge.signals >= SIGNALS_BEFORE_CONTINUE:
        return f"{gauge.signals} signals"
    if gauge.updates >= UPDATES_BEFORE_CONTINUE:
        return f"{gauge.updates} updates"
    if gauge.events >= EVENTS_BEFORE_CONTINUE:
        return f"{gauge.events} events"
    if gauge.size_bytes >= BYTES_BEFORE_CONTINUE:
        return f"{gauge.size_bytes} bytes of history"
    return None


def must_continue(gauge: HistoryGauge | None) -> bool:
    """Whether a run that would wait (for resume, a decision, a grant) continues as new first:
    near a limit, or when Temporal suggests it and this execution has some history of its own."""
    if gauge is None:
        return False
    suggested = gauge.suggested and gauge.events >= EVENTS_BEFORE_SUGGESTION
    return suggested or crowded(gauge) is not None


def text_problem(name: str, text: Text | None) -> str | None:
    """Why `text` may not travel in an input, or None."""
    if text is None:
        return None
    if isinstance(text, BlobRef):
        if len(text.sha256) != 64 or any(c not in "0123456789abcdef" for c in text.sha256):
            return f"{name} is a ref whose sha256 is not a sha256 digest"
        if len(text.preview) > REF_PREVIEW_CHARS or text.size < 0 or text.tokens < 0:
            return f"{name} is a malformed ref (preview over {REF_PREVIEW_CHARS} characters)"
        return None
    size = len(text.encode("utf-8"))
    if size > INPUT_TEXT_BYTES:
        return (
            f"{name} is {size:,} bytes inline; text over {INPUT_TEXT_BYTES:,} bytes must be put "
            f"in the blob store and sent as a ref (the Capstan client does this); it starts "
            f"{preview_of(text, 60)!r}"
        )
    return None


def describe(text: Text) -> str:
    """`text` as bounded words: itself when inline, else its preview and where the rest is."""
    if isinstance(text, str):
        return text
    return (
        f"{text.preview} [the full text, {text.size:,} bytes, is stored: read it with "
        f"{READ_RESULT_TOOL}(ref={text.sha256!r})]"
    )
