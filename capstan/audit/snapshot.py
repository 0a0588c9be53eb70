"""What a run looks like from its history alone: `status` and `transcript` with no worker.

A query needs a worker (even for a closed run: the worker replays it to answer). A run's history
and result do not, so a client that finds no worker answering builds the same views from what
Temporal stored: the conversation head from the last model reply, tool results since, decisions
and messages from the steering signals, open requests from the memo. What it cannot know (the
loop's private counters) it leaves at defaults, and every such view says what it is as of.
"""

from __future__ import annotations

from temporalio.client import WorkflowHistory

from capstan.audit.events import derive_events
from capstan.audit.history import Entry, decode_history
from capstan.core.activity_io import ModelReply
from capstan.core.activity_names import ActivityName
from capstan.core.loop import observation_text
from capstan.core.messages import Message, Usage
from capstan.core.spec import RunResult, RunStatus
from capstan.core.steering import (
    Answer,
    ApprovalRecord,
    Decision,
    LiveMessage,
    PauseRequest,
    ResumeRequest,
)
from capstan.core.tooling import ASK_USER_TOOL, ToolFailed, ToolSucceeded
from capstan.core.workflow_io import OpenRequests, TranscriptView

__all__ = ["Snapshot", "snapshot"]


class Snapshot:
    """One pass over a run's histories (oldest first) with the views derived from it."""

    def __init__(self, run_id: str, histories: list[WorkflowHistory]) -> None:
        self.run_id = run_id
        self.runs = [decode_history(h) for h in histories]
        self.entries: list[Entry] = [e for run in self.runs for e in run]
        self.last_event = max((e.event_id for e in self.runs[-1]), default=0) if self.runs else 0

    def _replies(self) -> list[tuple[Entry, ModelReply]]:
        return [
            (e, e.result)
            for e in self.entries
            if e.name == ActivityName.CALL_MODEL and isinstance(e.result, ModelReply)
        ]

    def step(self) -> int:
        steps = [ev.step for ev in derive_events(self.runs) if ev.step is not None]
        return max(steps, default=0)

    def usage(self) -> Usage:
        total = Usage()
        for _, reply in self._replies():
            u = reply.usage
            total = Usage(
                input_tokens=total.input_tokens + u.input_tokens,
                output_tokens=total.output_tokens + u.output_tokens,
                model_calls=total.model_calls + 1,
                tool_calls=total.tool_calls,
                cache_read_tokens=total.cache_read_tokens + u.cache_read_tokens,
                cache_write_tokens=total.cache_write_tokens + u.cache_write_tokens,
                cost_usd=total.cost_usd + u.cost_usd,
            )
        tools = sum(1 for e in self.entries if e.name == ActivityName.RUN_TOOL and e.finished)
        return total.model_copy(update={"tool_calls": tools})

    def open_requests(self) -> OpenRequests:
        announced = [e.data for e in self.entries if e.kind == "open_requests"]
        last = announced[-1] if announced else None
        return last if isinstance(last, OpenRequests) else OpenRequests()

    def paused(self) -> bool:
        paused = False
        for e in self.entries:
            if isinstance(e.data, PauseRequest | ResumeRequest) and e.kind in ("signal", "update"):
                paused = isinstance(e.data, PauseRequest)
        return paused

    def status(self, result: RunResult | None) -> RunStatus:
        """The run's status: from its result when it is over, else as of its last event."""
        continued = max(len(self.runs) - 1, 0)
        if result is not None:
            return result.status(continued)
        opened = self.open_requests()
        waits = ["resume"] if self.paused() else []
        waits += ["approval"] if opened.approvals else []
        waits += ["answer"] if opened.questions else []
        return RunStatus(
            run_id=self.run_id,
            phase="acting" if opened.approvals or opened.questions else "thinking",
            step=self.step(),
            usage=self.usage(),
            continued=continued,
            paused=self.paused(),
            waiting_for=waits,
            source="history",
            as_of_event=self.last_event,
        )

    def transcript(self) -> TranscriptView:
        """The conversation up to the last model reply, plus the tool results since it."""
        replies = self._replies()
        head = replies[-1][1].conversation if replies else None
        after = replies[-1][0].finished_event_id if replies else 0
        last_run = replies[-1][0].run_id if replies else ""
        pending: list[Message] = []
        for e in self.entries:
            done = e.name == ActivityName.RUN_TOOL and e.finished_event_id > after
            if done and e.run_id == last_run and isinstance(e.result, ToolSucceeded | ToolFailed):
                pending.append(_tool_message(e))
        return TranscriptView(
            conversation=head,
            pending=pending,
            in_flight=[],
            step=self.step(),
            records=self._records(),
            inbox=[],
        )

    def _records(self) -> list[ApprovalRecord]:
        """Decisions and answers as the signals carried them (applied or not: the history
        cannot tell; the audit trail shows both)."""
        records = []
        for e in self.entries:
            item = e.data
            if isinstance(item, Decision):
                records.append(
                    ApprovalRecord(
                        request_id=item.request_id,
                        tool="",
                        action=item.action,
                        identity=item.identity or e.identity,
                        at=e.time,
                        args_hash=item.args_hash,
                        executed_arguments=item.arguments if item.action == "edit" else None,
                        reason=item.reason,
                    )
                )
            elif isinstance(item, Answer):
                records.append(
                    ApprovalRecord(
                        request_id=item.request_id,
                        tool=ASK_USER_TOOL,
                        action="answered",
                        identity=item.identity or e.identity,
                        at=e.time,
                        executed_arguments=item.text,
                    )
                )
        return records

    def messages(self) -> list[LiveMessage]:
        return [e.data for e in self.entries if isinstance(e.data, LiveMessage)]


def _tool_message(e: Entry) -> Message:
    outcome = e.result
    return Message(
        role="tool",
        content=observation_text(outcome),
        tool_call_id=outcome.call_id,
        name=getattr(e.data, "name", None),
        origin="tool",
        step=getattr(e.data, "step", 0),
    )


def snapshot(run_id: str, histories: list[WorkflowHistory]) -> Snapshot:
    return Snapshot(run_id, histories)
