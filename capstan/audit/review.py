"""A reviewer's reading of an audit trail: the run's summary, its approvals, its steps.

The trail (`capstan.audit.trail`) is the record: flat, hash-chained, one entry per history event.
A reviewer asks other questions first (what was the run for, how did it end, what did it cost,
who approved what, does the record verify), then reads the steps. This module answers them from
the records alone, for the HTML and Markdown renderers; it never alters or drops a record, and
every record lands in exactly one block of the timeline, in trail order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from capstan.audit.display import parse_time
from capstan.audit.trail import verify_chain

__all__ = ["Approval", "Block", "Review", "read_trail"]

Record = dict[str, Any]

#: record kinds that are people steering the run (besides decisions)
INPUT_KINDS = frozenset(
    {"pause", "resume", "cancel", "send_message", "answer", "grant_steps", "grant_budget"}
)


@dataclass
class Approval:
    """One approval request and what people decided about it (possibly nothing yet)."""

    request_id: str
    tool: str = ""
    step: int | None = None
    call_id: str = ""
    why: str = ""
    args_hash: str = ""
    requested: Record | None = None
    expires_at: str | None = None
    decisions: list[Record] = field(default_factory=list)

    @property
    def decision(self) -> Record | None:
        """The first decision: the run consumes a decision once; later ones change nothing."""
        return self.decisions[0] if self.decisions else None


@dataclass
class Block:
    """A stretch of the timeline: before the first step, one step, or the end."""

    kind: Literal["start", "step", "end"]
    step: int | None
    records: list[Record] = field(default_factory=list)


@dataclass
class Review:
    records: list[Record]
    problems: list[str]
    run_id: str = ""
    task: str = ""
    spec: Record | None = None
    started_by: str = ""
    temporal_runs: list[str] = field(default_factory=list)
    ended: Record | None = None
    steps: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    models: list[str] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    inputs: list[Record] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)

    @property
    def forked_from(self) -> str | None:
        """For a fork (`capstan fork`): where it branched off, in words; None otherwise."""
        point = (self.spec or {}).get("forked_from")
        if not isinstance(point, dict):
            return None
        return (
            f"run {point.get('run_id')} after step {point.get('step')}: the steps before are "
            "that run's (audit it for them); this run's own follow"
        )

    @property
    def started_at(self) -> str | None:
        return self.records[0]["time"] if self.records else None

    @property
    def last_at(self) -> str | None:
        return self.records[-1]["time"] if self.records else None

    @property
    def duration_s(self) -> float | None:
        start, end = parse_time(self.started_at), parse_time(self.last_at)
        return (end - start).total_seconds() if start and end else None

    @property
    def outcome(self) -> str:
        return str(self.ended.get("terminal_reason") or "ended") if self.ended else "running"

    @property
    def head(self) -> str:
        return str(self.records[-1].get("hash", "")) if self.records else ""


def _approvals(records: list[Record]) -> list[Approval]:
    by_id: dict[str, Approval] = {}
    for rec in records:
        if rec["kind"] == "open_requests":
            for asked in rec.get("approvals") or []:
                rid = str(asked.get("request_id"))
                if rid not in by_id:
                    by_id[rid] = Approval(
                        request_id=rid,
                        tool=str(asked.get("tool", "")),
                        step=asked.get("step"),
                        call_id=str(asked.get("call_id", "")),
                        why=str(asked.get("reason", "")),
                        args_hash=str(asked.get("args_hash", "")),
                        requested=rec,
                        expires_at=asked.get("expires_at"),
                    )
        elif rec["kind"] == "decision":
            rid = str(rec.get("request_id"))
            by_id.setdefault(rid, Approval(request_id=rid)).decisions.append(rec)
    return list(by_id.values())


def _blocks(records: list[Record]) -> list[Block]:
    blocks = [Block("start", None)]
    for rec in records:
        kind, current = rec["kind"], blocks[-1]
        if kind == "model_call" and (current.kind != "step" or current.step != rec.get("step")):
            blocks.append(Block("step", rec.get("step")))
        elif kind == "run_ended" and current.kind != "end":
            blocks.append(Block("end", None))
        blocks[-1].records.append(rec)
    return [b for b in blocks if b.records]


def _tally(review: Review, rec: Record) -> None:
    kind = rec["kind"]
    if kind == "model_call":
        review.model_calls += 1
        review.steps = max(review.steps, int(rec.get("step") or 0))
        usage = rec.get("usage") or {}
        review.input_tokens += int(usage.get("input_tokens") or 0)
        review.output_tokens += int(usage.get("output_tokens") or 0)
        review.cost_usd += float(usage.get("cost_usd") or 0.0)
        model = str(rec.get("model") or rec.get("profile") or "")
        if model and model not in review.models:
            review.models.append(model)
    elif kind == "tool_call":
        review.tool_calls += 1
    elif kind == "run_started" and review.spec is None:
        review.spec = rec.get("spec") or {}
        review.started_by = str(rec.get("client") or "")
    elif kind == "run_ended":
        review.ended = rec
    elif kind in INPUT_KINDS or kind == "cancel_requested":
        review.inputs.append(rec)
    run = str(rec.get("run") or "")
    if run and run not in review.temporal_runs:
        review.temporal_runs.append(run)


def _final_totals(review: Review) -> None:
    """The run's own result is the authority for its totals once it has ended (it counts
    model calls the trail may show as failed attempts the same way the budget did)."""
    if review.ended is None:
        return
    usage = review.ended.get("usage") or {}
    review.steps = int(review.ended.get("steps") or review.steps)
    review.input_tokens = int(usage.get("input_tokens", review.input_tokens))
    review.output_tokens = int(usage.get("output_tokens", review.output_tokens))
    review.cost_usd = float(usage.get("cost_usd", review.cost_usd))


def read_trail(records: list[Record], issues: list[str]) -> Review:
    """The reviewer's view of a trail; `problems` joins the blob issues found while building it
    with whatever `verify_chain` finds in the records as given."""
    review = Review(records=records, problems=[*issues, *verify_chain(records)])
    for rec in records:
        _tally(review, rec)
    _final_totals(review)
    spec = review.spec or {}
    review.run_id = str(spec.get("run_id") or (review.temporal_runs or [""])[0])
    review.task = str(spec.get("task") or "")
    review.approvals = _approvals(records)
    review.blocks = _blocks(records)
    return review
