"""The run state the pure loop folds outcomes into.

It is carried across continue-as-new, so it must stay small whatever the run length: the
conversation lives in the blob store as a hash chain and the state holds only its head plus the
messages not yet appended to it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from capstan.core.content import BlobRef, Text
from capstan.core.guards import GuardState
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.models import ModelChain, ModelInfo
from capstan.core.spec import Phase, RunSpec, RunStatus, TerminalReason
from capstan.core.steering import ApprovalRecord, ApprovalRequest, PendingView, Question
from capstan.core.tooling import ToolCatalog, ToolOutcome

#: Bounds that keep the carried state small whatever the run length.
MAX_APPLIED_IDS = 1000
MAX_RECORDS = 200
MAX_DIAGNOSTICS = 50

__all__ = ["RunState"]


class RunState(BaseModel):
    """Everything the loop knows about one run. Immutable: `loop.apply` returns a new one."""

    model_config = ConfigDict(frozen=True)

    spec: RunSpec
    run_id: str
    phase: Phase = "starting"
    step: int = 0
    catalog: ToolCatalog | None = None
    conversation: BlobRef | None = None
    pending: tuple[Message, ...] = ()
    turn_calls: tuple[ToolCall, ...] = ()
    decided: tuple[ToolOutcome, ...] = ()
    usage: Usage = Usage()
    nudges: int = 0
    terminal: TerminalReason | None = None
    output: Text | None = None
    error: str | None = None
    cancel_reason: str | None = None
    segment_steps: int = 0
    continued: int = 0
    # steering (issue 3); all bounded, all carried across continue-as-new
    gating: bool = False
    rule_of_two: bool = False
    approvals: tuple[ApprovalRequest, ...] = ()
    questions: tuple[Question, ...] = ()
    approved_args: dict[str, Text] = {}
    edited: dict[str, str] = {}
    always: tuple[str, ...] = ()
    paused: bool = False
    inbox: tuple[Message, ...] = ()
    extra_steps: int = 0
    applied_ids: tuple[str, ...] = ()
    diagnostics: tuple[str, ...] = ()
    records: tuple[ApprovalRecord, ...] = ()
    now: datetime | None = None
    # model and context (issue 4)
    context_managed: bool = False
    model_chain: ModelChain | None = None
    model_index: int = 0
    context_tokens: int = 0
    calibration: float = 1.0
    compacted_step: int = -1
    compaction_stage: int = 0
    compaction_due: str | None = None
    overflow_step: int = -1
    warned: bool = False
    compactions: int = 0
    model_switches: tuple[str, ...] = ()
    # guards and budgets (issue 5)
    guarded: bool = False
    guard: GuardState = GuardState()
    finish_refused: bool = False
    finish_pending: ToolCall | None = None  # a finish waiting for the worker's hook
    finalize_warned: bool = False
    started_at: datetime | None = None
    budget_extra: dict[str, float] = {}

    @property
    def model(self) -> ModelInfo | None:
        if self.model_chain is None or not self.model_chain.models:
            return None
        return self.model_chain.models[min(self.model_index, len(self.model_chain.models) - 1)]

    @property
    def profile(self) -> str:
        """The profile the next model call uses: the spec's, or a fallback after a switch."""
        model = self.model
        return model.profile if model is not None else self.spec.model

    @property
    def step_limit(self) -> int:
        return self.spec.max_steps + self.extra_steps

    @property
    def awaiting_steps(self) -> bool:
        return (
            self.phase == "thinking"
            and self.terminal is None
            and self.step >= self.step_limit
            and self.spec.wait_for_steps_grant
        )

    def waiting_for(self) -> list[str]:
        """What the run is blocked on, in words: approval, answer, steps, resume."""
        waits = []
        if self.paused:
            waits.append("resume")
        if self.approvals:
            waits.append("approval")
        if self.questions:
            waits.append("answer")
        if self.awaiting_steps:
            waits.append("steps")
        return waits

    def pending_view(self) -> PendingView:
        return PendingView(
            run_id=self.run_id,
            approvals=list(self.approvals),
            questions=list(self.questions),
            awaiting_steps=self.awaiting_steps,
            paused=self.paused,
        )

    def status(self) -> RunStatus:
        """The public view answered by the `status` query."""
        return RunStatus(
            run_id=self.run_id,
            phase=self.phase,
            step=self.step,
            terminal_reason=self.terminal,
            output=self.output,
            error=self.error,
            usage=self.usage,
            continued=self.continued,
            paused=self.paused,
            waiting_for=self.waiting_for(),
            diagnostics=list(self.diagnostics[-10:]),
        )
