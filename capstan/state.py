"""The run state the pure loop folds outcomes into.

It is carried across continue-as-new, so it must stay small whatever the run length: the
conversation lives in the blob store as a hash chain and the state holds only its head plus the
messages not yet appended to it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from capstan.content import BlobRef, Text
from capstan.messages import Message, ToolCall, Usage
from capstan.spec import Phase, RunSpec, RunStatus, TerminalReason
from capstan.tooling import ToolCatalog, ToolFailed

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
    decided: tuple[ToolFailed, ...] = ()
    usage: Usage = Usage()
    nudges: int = 0
    terminal: TerminalReason | None = None
    output: Text | None = None
    error: str | None = None
    cancel_reason: str | None = None
    segment_steps: int = 0
    continued: int = 0

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
        )
