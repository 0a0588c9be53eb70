"""The durable step-level event stream of a run, derived from its Temporal history.

History is append-only, and each event is placed at the history event that caused it (a model
reply at the activity's completion, not its scheduling), so an event's sequence number never
changes as the run goes on: a watcher resuming `--from N` sees every event exactly once and in
order, across continue-as-new and worker restarts. (An equivalent of a workflow-side stream,
with the history as the one durable log.)
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from capstan.audit.display import duration
from capstan.audit.history import Entry
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef, Text
from capstan.core.steering import SteeringBase

__all__ = ["RunEvent", "derive_events"]


class RunEvent(BaseModel):
    seq: int = 0
    kind: str
    time: str
    step: int | None = None
    summary: str = ""
    data: dict[str, Any] = {}


def _preview(text: Text | None, limit: int = 120) -> str:
    if text is None:
        return ""
    raw = text.preview if isinstance(text, BlobRef) else text
    flat = " ".join(raw.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


Placed = tuple[int, int, int, RunEvent]  # (run index, history event id, order, event)


def _activity_events(i: int, e: Entry) -> list[Placed]:
    start, end = e.event_id, e.finished_event_id
    out: list[Placed] = []
    if e.name == ActivityName.CALL_MODEL:
        step = e.data.step
        out.append((i, start, 0, RunEvent(kind="step_started", time=e.time.isoformat(), step=step)))
        for n, m in enumerate(e.data.new_messages):
            if m.origin in ("nudge", "live"):
                kind = "nudge" if m.origin == "nudge" else "message_injected"
                event = RunEvent(
                    kind=kind, time=e.time.isoformat(), step=step, summary=_preview(m.content)
                )
                out.append((i, start, 1 + n, event))
        if end and e.result is not None and hasattr(e.result, "message"):
            calls = ", ".join(c.name for c in e.result.message.tool_calls)
            summary = _preview(e.result.message.content) + (f" -> {calls}" if calls else "")
            event = RunEvent(
                kind="model_replied",
                time=(e.finished or e.time).isoformat(),
                step=step,
                summary=summary.strip(),
            )
            out.append((i, end, 0, event))
        elif end:
            out.append(
                (
                    i,
                    end,
                    0,
                    RunEvent(
                        kind="model_failed",
                        time=(e.finished or e.time).isoformat(),
                        step=step,
                        summary=e.error or "",
                    ),
                )
            )
    elif e.name == ActivityName.RUN_TOOL:
        step, name = e.data.step, e.data.name
        out.append(
            (
                i,
                start,
                0,
                RunEvent(
                    kind="tool_started",
                    time=e.time.isoformat(),
                    step=step,
                    summary=name,
                    data={"call_id": e.data.call_id},
                ),
            )
        )
        if end:
            outcome = getattr(e.result, "kind", "failed")
            event = RunEvent(
                kind="tool_finished",
                time=(e.finished or e.time).isoformat(),
                step=step,
                summary=f"{name}: {outcome}",
                data={"call_id": e.data.call_id},
            )
            out.append((i, end, 0, event))
    elif e.name == ActivityName.COMPACT_CONTEXT and end and e.result is not None:
        r = e.result
        summary = f"{r.strategy}: ~{r.tokens_before} -> ~{r.tokens_after} tokens"
        out.append(
            (
                i,
                end,
                0,
                RunEvent(
                    kind="compaction",
                    time=(e.finished or e.time).isoformat(),
                    step=e.data.step,
                    summary=summary,
                ),
            )
        )
    return out


def _request_events(i: int, e: Entry, seen: set[str]) -> list[Placed]:
    """Each approval request and question once, when it is first announced."""
    t = e.time.isoformat()
    out: list[Placed] = []
    for n, r in enumerate([*e.data.approvals, *e.data.questions]):
        if r.request_id in seen:
            continue
        seen.add(r.request_id)
        is_question = not hasattr(r, "args_hash")
        summary = r.question if is_question else f"{r.tool} {r.request_id} ({r.reason})"
        kind = "question_asked" if is_question else "approval_requested"
        event = RunEvent(
            kind=kind, time=t, step=r.step, summary=summary, data=r.model_dump(mode="json")
        )
        out.append((i, e.event_id, n, event))
    return out


def _other_events(i: int, e: Entry) -> list[Placed]:
    t = e.time.isoformat()
    if e.kind == "run_started" and i == 0:
        return [
            (
                i,
                e.event_id,
                0,
                RunEvent(
                    kind="run_started", time=t, summary=_preview(e.data.spec.task) if e.data else ""
                ),
            )
        ]
    if e.kind in ("signal", "update") and isinstance(e.data, SteeringBase):
        data = e.data.model_dump(mode="json")
        who = data.get("identity") or e.identity
        detail = data.get("action") or data.get("text") or data.get("reason") or ""
        summary = f"{detail} {data.get('request_id', '')}".strip() + (f" (by {who})" if who else "")
        return [
            (
                i,
                e.event_id,
                0,
                RunEvent(kind=e.data.wire.event, time=t, summary=summary, data=data),
            )
        ]
    if e.kind == "wait":
        return [
            (
                i,
                e.event_id,
                0,
                RunEvent(
                    kind="waiting", time=t, summary=f"up to {duration(e.extra.get('seconds', 0))}"
                ),
            )
        ]
    if e.kind == "continued_as_new":
        return [(i, e.event_id, 0, RunEvent(kind="continued_as_new", time=t))]
    if e.kind == "run_ended":
        reason = e.data.terminal_reason.value if e.data is not None else (e.error or "ended")
        return [(i, e.event_id, 0, RunEvent(kind="run_ended", time=t, summary=reason))]
    return []


def derive_events(runs: list[list[Entry]]) -> list[RunEvent]:
    """Every event of the run so far, numbered from 0."""
    placed: list[Placed] = []
    announced: set[str] = set()
    for i, entries in enumerate(runs):
        for e in entries:
            if e.kind == "activity":
                placed += _activity_events(i, e)
            elif e.kind == "open_requests" and e.data is not None:
                placed += _request_events(i, e, announced)
            else:
                placed += _other_events(i, e)
    placed.sort(key=lambda p: (p[0], p[1], p[2]))
    return [p[3].model_copy(update={"seq": n}) for n, p in enumerate(placed)]
