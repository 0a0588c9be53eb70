"""The loop's vocabulary: effects it asks for (imperative) and outcomes it is told (past tense).

The workflow performs effects and reports outcomes; `capstan.core.loop` never performs anything.
Every member carries a `kind` literal so the unions round-trip through any converter.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from capstan.core.activity_io import (
    CallModelInput,
    CheckFinishInput,
    CompactInput,
    CompactResult,
    DescribeModelInput,
    FinishVerdict,
    ListToolsInput,
    ModelReply,
    RunToolInput,
)
from capstan.core.activity_names import ActivityName
from capstan.core.children import ChildEnded, Delegation
from capstan.core.inbox import InboxQueue, SpillInput, TakeInput, TakenMessages
from capstan.core.messages import Message
from capstan.core.models import ModelChain
from capstan.core.spec import RunResult
from capstan.core.steering import SteeringInput
from capstan.core.tooling import ToolCatalog, ToolOutcome

__all__ = [
    "ActivityEffect",
    "AwaitInput",
    "Boundary",
    "CallModel",
    "CancelRequested",
    "CheckFinish",
    "CompactContext",
    "CompactionFailed",
    "ContextCompacted",
    "ContinueAsNew",
    "DescribeModel",
    "Effect",
    "Finish",
    "FinishChecked",
    "InboxUnavailable",
    "InputRefused",
    "LoadTools",
    "MessagesSpilled",
    "MessagesTaken",
    "ModelDescribed",
    "ModelFailed",
    "ModelReplied",
    "Outcome",
    "RunTools",
    "SpillMessages",
    "Steered",
    "TakeMessages",
    "ToolsFinished",
    "ToolsLoaded",
    "ToolsUnavailable",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


# Effects ---------------------------------------------------------------------------------------


# An effect performed by one activity names it in `activity` and says which outcome its result
# or its failure (a kind from `_describe` in the workflow, and a message) becomes.


class LoadTools(_Frozen):
    kind: Literal["load_tools"] = "load_tools"
    request: ListToolsInput
    activity: ClassVar[ActivityName] = ActivityName.LIST_TOOLS

    def succeeded(self, result: ToolCatalog) -> Outcome:
        return ToolsLoaded(catalog=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return ToolsUnavailable(error=error)


class DescribeModel(_Frozen):
    kind: Literal["describe_model"] = "describe_model"
    request: DescribeModelInput
    activity: ClassVar[ActivityName] = ActivityName.DESCRIBE_MODEL

    def succeeded(self, result: ModelChain) -> Outcome:
        return ModelDescribed(chain=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return ModelFailed(error=error, error_type=error_type)


class CompactContext(_Frozen):
    kind: Literal["compact_context"] = "compact_context"
    request: CompactInput
    activity: ClassVar[ActivityName] = ActivityName.COMPACT_CONTEXT

    def succeeded(self, result: CompactResult) -> Outcome:
        return ContextCompacted(result=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return CompactionFailed(error=error)


class CheckFinish(_Frozen):
    """Ask the worker's finish guard hook whether this `finish` may end the run."""

    kind: Literal["check_finish"] = "check_finish"
    request: CheckFinishInput
    activity: ClassVar[ActivityName] = ActivityName.CHECK_FINISH

    def succeeded(self, result: FinishVerdict) -> Outcome:
        return FinishChecked(verdict=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return FinishChecked(verdict=FinishVerdict(refusal=f"the finish guard failed: {error}"))


class SpillMessages(_Frozen):
    """Keep the oldest live messages held inline in the blob store (`capstan.core.inbox`)."""

    kind: Literal["spill_messages"] = "spill_messages"
    request: SpillInput
    activity: ClassVar[ActivityName] = ActivityName.SPILL_MESSAGES

    def succeeded(self, result: InboxQueue) -> Outcome:
        return MessagesSpilled(count=len(self.request.messages), queue=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return InboxUnavailable(error=f"could not keep live messages in the blob store: {error}")


class TakeMessages(_Frozen):
    """Read the oldest chunk of the live messages kept in the blob store."""

    kind: Literal["take_messages"] = "take_messages"
    request: TakeInput
    activity: ClassVar[ActivityName] = ActivityName.TAKE_MESSAGES

    def succeeded(self, result: TakenMessages) -> Outcome:
        return MessagesTaken(messages=result.messages, queue=result.queue)

    def failed(self, error_type: str, error: str) -> Outcome:
        return InboxUnavailable(error=f"could not read live messages from the blob store: {error}")


class CallModel(_Frozen):
    kind: Literal["call_model"] = "call_model"
    request: CallModelInput
    activity: ClassVar[ActivityName] = ActivityName.CALL_MODEL

    def succeeded(self, result: ModelReply) -> Outcome:
        return ModelReplied(reply=result)

    def failed(self, error_type: str, error: str) -> Outcome:
        return ModelFailed(error=error, error_type=error_type)


class RunTools(_Frozen):
    """Run these calls, and start these children (`delegate`) and wait for their ends, all in
    parallel, at most `concurrency` at a time."""

    kind: Literal["run_tools"] = "run_tools"
    calls: tuple[RunToolInput, ...]
    concurrency: int
    timeouts: tuple[float, ...]
    children: tuple[Delegation, ...] = ()


class AwaitInput(_Frozen):
    """Wait durably for human input (or until `until`, the earliest expiry)."""

    kind: Literal["await_input"] = "await_input"
    waiting_for: tuple[str, ...]
    until: datetime | None = None


class ContinueAsNew(_Frozen):
    kind: Literal["continue_as_new"] = "continue_as_new"
    #: only so the wait for a person that comes next starts in a short history
    #: (`capstan.core.planner.waits_fresh`); otherwise the segment or the history limits
    before_wait: bool = False


class Finish(_Frozen):
    kind: Literal["finish"] = "finish"
    result: RunResult


#: The effects one activity performs (the workflow's table); `RunTools` runs one per call.
ActivityEffect = (
    LoadTools
    | DescribeModel
    | CompactContext
    | CheckFinish
    | CallModel
    | SpillMessages
    | TakeMessages
)

Effect = (
    LoadTools
    | DescribeModel
    | CompactContext
    | CheckFinish
    | CallModel
    | SpillMessages
    | TakeMessages
    | RunTools
    | AwaitInput
    | ContinueAsNew
    | Finish
)


# Outcomes --------------------------------------------------------------------------------------


class ToolsLoaded(_Frozen):
    kind: Literal["tools_loaded"] = "tools_loaded"
    catalog: ToolCatalog


class ToolsUnavailable(_Frozen):
    """The tool catalog could not be listed (retries spent): the run cannot start."""

    kind: Literal["tools_unavailable"] = "tools_unavailable"
    error: str


class ModelDescribed(_Frozen):
    kind: Literal["model_described"] = "model_described"
    chain: ModelChain


class ContextCompacted(_Frozen):
    kind: Literal["context_compacted"] = "context_compacted"
    result: CompactResult


class FinishChecked(_Frozen):
    kind: Literal["finish_checked"] = "finish_checked"
    verdict: FinishVerdict


class CompactionFailed(_Frozen):
    kind: Literal["compaction_failed"] = "compaction_failed"
    error: str


class ModelReplied(_Frozen):
    kind: Literal["model_replied"] = "model_replied"
    reply: ModelReply


class ModelFailed(_Frozen):
    """The model activity failed for good (retries spent or a non-retryable error)."""

    kind: Literal["model_failed"] = "model_failed"
    error: str
    error_type: str = ""


class ToolsFinished(_Frozen):
    kind: Literal["tools_finished"] = "tools_finished"
    results: tuple[ToolOutcome, ...]
    children: tuple[ChildEnded, ...] = ()


class MessagesSpilled(_Frozen):
    """The oldest `count` live messages held inline are in the blob store's `queue` now."""

    kind: Literal["messages_spilled"] = "messages_spilled"
    count: int
    queue: InboxQueue


class MessagesTaken(_Frozen):
    """The oldest kept live messages, read for the next model call; `queue` is what is left."""

    kind: Literal["messages_taken"] = "messages_taken"
    messages: tuple[Message, ...]
    queue: InboxQueue


class InboxUnavailable(_Frozen):
    """The blob store failed for good while keeping or reading live messages."""

    kind: Literal["inbox_unavailable"] = "inbox_unavailable"
    error: str


class CancelRequested(_Frozen):
    kind: Literal["cancel_requested"] = "cancel_requested"
    reason: str = ""


class Steered(_Frozen):
    """A human input arrived (signal or update)."""

    kind: Literal["steered"] = "steered"
    input: SteeringInput


class InputRefused(_Frozen):
    """A signal that is not a steering input (unknown name, malformed payload) arrived; the run
    notes it and goes on."""

    kind: Literal["input_refused"] = "input_refused"
    problem: str


class Boundary(_Frozen):
    """The interpreter is at a step boundary; `now` is workflow time."""

    kind: Literal["boundary"] = "boundary"
    now: datetime


Outcome = (
    ToolsLoaded
    | ToolsUnavailable
    | ModelDescribed
    | ContextCompacted
    | CompactionFailed
    | FinishChecked
    | ModelReplied
    | ModelFailed
    | ToolsFinished
    | MessagesSpilled
    | MessagesTaken
    | InboxUnavailable
    | CancelRequested
    | Steered
    | InputRefused
    | Boundary
)
