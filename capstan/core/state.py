"""The run state the pure loop folds outcomes into.

It is carried across continue-as-new, so it must stay small whatever the run length: the
conversation lives in the blob store as a hash chain and the state holds only its head plus the
messages not yet appended to it.

The state is grouped by concern, so each helper reads (and returns) the part it knows about:

| part | holds | written by |
|---|---|---|
| `phase`, `ending` | where the run is; how it ended | `capstan.core.transitions` only |
| `conversation` | the chain's head and the messages since | the loop, context compaction |
| `turn` | the acting turn: its calls, decisions, open requests | the gate, the steering fold |
| `steering` | what people asked: pause, cancel, messages; the approval audit | the steering fold |
| `context` | the model chain and the context window | context planning |
| `guards` | nudges, breaker streaks, the finish guard | turn checks |
| `budget` | the wall clock's start and what was granted | the loop, the steering fold |
| `segment` | steps since the last continue-as-new, and how many there were | the loop |
| `children` | the child runs it delegated to (their ids, for the memo) | the loop |

Every type here is a frozen pydantic dataclass: a change is `dataclasses.replace(part, ...)`,
which mypy checks field by field (a misspelt or mistyped field fails `make lint`) and pydantic
validates at run time, where an update dict given to `model_copy` accepted any key silently.
"""

from __future__ import annotations

from dataclasses import field, replace
from datetime import datetime

from pydantic.dataclasses import dataclass

from capstan.core.children import ChildRun
from capstan.core.content import BlobRef, Text
from capstan.core.guards import Streaks
from capstan.core.idset import IdSet
from capstan.core.inbox import InboxQueue
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.models import ModelChain, ModelInfo
from capstan.core.spec import (
    STATUS_DIAGNOSTICS,
    OutputFormat,
    Phase,
    RunSpec,
    RunStatus,
    TerminalReason,
)
from capstan.core.steering import ApprovalRecord, ApprovalRequest, PendingView, Question
from capstan.core.tooling import ToolCatalog, ToolOutcome

#: Bounds that keep the carried state small whatever the run length (more in `core.limits`).
MAX_RECORDS = 200
MAX_DIAGNOSTICS = 50

__all__ = [
    "MAX_DIAGNOSTICS",
    "MAX_RECORDS",
    "Budget",
    "ContextState",
    "Conversation",
    "Ending",
    "Guards",
    "RunState",
    "Segment",
    "Steering",
    "Turn",
]


@dataclass(frozen=True)
class Ending:
    """How a run ended: its one terminal reason, why (unless it completed), and its answer.

    Also the verdict a helper returns when the run must end; `transitions.end` records it.
    """

    reason: TerminalReason
    error: str | None = None
    output: Text | None = None
    output_format: OutputFormat = "text"


@dataclass(frozen=True)
class Conversation:
    head: BlobRef | None = None  # the chain as the model last saw it
    pending: tuple[Message, ...] = ()  # to be sent with the next model call


@dataclass(frozen=True)
class Turn:
    """The acting turn. Each call ends up decided now (`decided`), waiting for a person
    (`approvals` / `questions`), or neither: it runs once no request of the turn is open."""

    calls: tuple[ToolCall, ...] = ()
    decided: tuple[ToolOutcome, ...] = ()
    approvals: tuple[ApprovalRequest, ...] = ()
    questions: tuple[Question, ...] = ()
    approved_args: dict[str, Text] = field(default_factory=dict)
    edited: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Steering:
    """What people asked for, bounded and carried across continue-as-new (the bounds are in
    `capstan.core.limits`)."""

    paused: bool = False
    cancel_reason: str | None = None  # a requested cancellation; the next boundary ends the run
    inbox: tuple[Message, ...] = ()  # live messages, drained before the next model call
    #: live messages past the inline bound, in the blob store (`capstan.core.inbox`), older
    #: than every message of `inbox`
    queue: InboxQueue = field(default_factory=InboxQueue)
    #: the inbox takes every live message, keeping what it cannot hold in `queue`; off only in
    #: executions recorded before `Patch.INBOX_QUEUE`, which refused past the bound (set by the
    #: workflow the first time the bound is reached)
    spills: bool = False
    #: the blob store failed for good keeping or reading the messages: no more spills
    spill_error: str | None = None
    always: tuple[str, ...] = ()  # tools approved for the rest of the run
    applied_ids: tuple[str, ...] = ()  # the last 1,000 ids, as states before `seen` carried them
    records: tuple[ApprovalRecord, ...] = ()
    seen: IdSet = field(default_factory=IdSet)  # every id applied, for the life of the run

    @property
    def messages_waiting(self) -> int:
        """Live messages accepted and not yet given to the model."""
        return len(self.inbox) + self.queue.count

    def applied(self, item_id: str) -> bool:
        """Whether an input with this id was applied already."""
        return item_id in self.seen or item_id in self.applied_ids

    def remember(self, item_id: str) -> Steering:
        """`item_id` applied (the ids of an older state's `applied_ids` move into `seen`)."""
        seen = self.seen.with_ids(*self.applied_ids, item_id)
        return replace(self, seen=seen, applied_ids=())


@dataclass(frozen=True)
class ContextState:
    """The model chain and the context window."""

    model_chain: ModelChain | None = None
    model_index: int = 0
    tokens: int = 0  # the conversation as of the last reply (provider-reported)
    calibration: float = 1.0  # reported / estimated input tokens of the last call
    compacted_step: int = -1
    compaction_stage: int = 0
    compaction_due: str | None = None
    overflow_step: int = -1
    warned: bool = False
    compactions: int = 0
    model_switches: tuple[str, ...] = ()
    #: compaction hysteresis (`capstan.core.context.RELIEF`); off only when replaying a run
    #: recorded before it (the workflow sets it from `Patch.COMPACTION`)
    hysteresis: bool = True
    #: tokens the last compaction could not remove (pinned messages and kept turns)
    kept_tokens: int = 0


@dataclass(frozen=True)
class Guards:
    """Turn checks and circuit breakers."""

    nudges: int = 0  # corrective nudges in a row
    streaks: Streaks = field(default_factory=Streaks)
    finish_refused: bool = False
    finish_pending: ToolCall | None = None  # a finish waiting for the worker's check
    finalize_warned: bool = False
    invalid_outputs: int = 0  # answers the run's output schema refused


@dataclass(frozen=True)
class Budget:
    started_at: datetime | None = None  # workflow time of the first boundary
    extra: dict[str, float] = field(default_factory=dict)  # granted per budget
    extra_steps: int = 0  # granted steps


@dataclass(frozen=True)
class Segment:
    steps: int = 0  # steps since the last continue-as-new
    continued: int = 0  # continue-as-new count


@dataclass(frozen=True)
class RunState:
    """Everything the loop knows about one run. Immutable: `loop.apply` returns a new one."""

    spec: RunSpec
    run_id: str
    phase: Phase = "starting"
    ending: Ending | None = None
    step: int = 0
    now: datetime | None = None  # workflow time at the last boundary
    catalog: ToolCatalog | None = None
    rule_of_two: bool = False
    usage: Usage = field(default_factory=Usage)
    conversation: Conversation = field(default_factory=Conversation)
    turn: Turn = field(default_factory=Turn)
    steering: Steering = field(default_factory=Steering)
    context: ContextState = field(default_factory=ContextState)
    guards: Guards = field(default_factory=Guards)
    budget: Budget = field(default_factory=Budget)
    segment: Segment = field(default_factory=Segment)
    diagnostics: tuple[str, ...] = ()
    #: the children this run started (`delegate`), most recent last (`children.MAX_CHILDREN`)
    children: tuple[ChildRun, ...] = ()
    #: this execution was recorded before `Patch.LEAST_PRIVILEGE`: its run's tool rules take
    #: precedence over the worker's, as they did then (set by the workflow, for replay only)
    legacy_policy: bool = False

    @property
    def terminal(self) -> TerminalReason | None:
        return self.ending.reason if self.ending is not None else None

    @property
    def output(self) -> Text | None:
        return self.ending.output if self.ending is not None else None

    @property
    def error(self) -> str | None:
        return self.ending.error if self.ending is not None else None

    @property
    def output_format(self) -> OutputFormat:
        return self.ending.output_format if self.ending is not None else "text"

    @property
    def model(self) -> ModelInfo | None:
        chain = self.context.model_chain
        if chain is None or not chain.models:
            return None
        return chain.models[min(self.context.model_index, len(chain.models) - 1)]

    @property
    def profile(self) -> str:
        """The profile the next model call uses: the spec's, or a fallback after a switch."""
        model = self.model
        return model.profile if model is not None else self.spec.model

    @property
    def step_limit(self) -> int:
        return self.spec.max_steps + self.budget.extra_steps

    @property
    def awaiting_steps(self) -> bool:
        return (
            self.phase == "thinking"
            and self.ending is None
            and self.step >= self.step_limit
            and self.spec.wait_for_steps_grant
        )

    def waiting_for(self) -> list[str]:
        """What the run is blocked on, in words: approval, answer, steps, resume (nothing, once
        it has ended)."""
        waits: list[str] = []
        if self.ending is not None:
            return waits
        if self.steering.paused:
            waits.append("resume")
        if self.turn.approvals:
            waits.append("approval")
        if self.turn.questions:
            waits.append("answer")
        if self.awaiting_steps:
            waits.append("steps")
        return waits

    def pending_view(self) -> PendingView:
        """The `pending` query. An ended run's requests are closed: nothing can decide them."""
        open_turn = self.turn if self.ending is None else Turn()
        return PendingView(
            run_id=self.run_id,
            approvals=list(open_turn.approvals),
            questions=list(open_turn.questions),
            awaiting_steps=self.awaiting_steps,
            paused=self.steering.paused,
        )

    def status(self, waiting_for: list[str] | None = None) -> RunStatus:
        """The public view answered by the `status` query (`waiting_for` from the loop's
        decision when it knows better, see `loop.status`)."""
        return RunStatus(
            run_id=self.run_id,
            phase=self.phase,
            step=self.step,
            terminal_reason=self.terminal,
            output=self.output,
            output_format=self.output_format,
            error=self.error,
            usage=self.usage,
            continued=self.segment.continued,
            paused=self.steering.paused,
            waiting_for=self.waiting_for() if waiting_for is None else waiting_for,
            diagnostics=list(self.diagnostics[-STATUS_DIAGNOSTICS:]),
            messages_waiting=self.steering.messages_waiting,
        )
