"""The loop's vocabulary: effects it asks for (imperative) and outcomes it is told (past tense).

The workflow performs effects and reports outcomes; `capstan.loop` never performs anything.
Every member carries a `kind` literal so the unions round-trip through any converter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from capstan.activity_io import (
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
from capstan.models import ModelChain
from capstan.spec import RunResult
from capstan.steering import SteeringInput
from capstan.tooling import ToolCatalog, ToolOutcome

__all__ = [
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
    "LoadTools",
    "ModelDescribed",
    "ModelFailed",
    "ModelReplied",
    "Outcome",
    "RunTools",
    "Steered",
    "ToolsFinished",
    "ToolsLoaded",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


# Effects ---------------------------------------------------------------------------------------


class LoadTools(_Frozen):
    kind: Literal["load_tools"] = "load_tools"
    request: ListToolsInput


class DescribeModel(_Frozen):
    kind: Literal["describe_model"] = "describe_model"
    request: DescribeModelInput


class CompactContext(_Frozen):
    kind: Literal["compact_context"] = "compact_context"
    request: CompactInput


class CheckFinish(_Frozen):
    """Ask the worker's finish guard hook whether this `finish` may end the run."""

    kind: Literal["check_finish"] = "check_finish"
    request: CheckFinishInput


class CallModel(_Frozen):
    kind: Literal["call_model"] = "call_model"
    request: CallModelInput


class RunTools(_Frozen):
    """Run these calls, in parallel, at most `concurrency` at a time."""

    kind: Literal["run_tools"] = "run_tools"
    calls: tuple[RunToolInput, ...]
    concurrency: int
    timeouts: tuple[float, ...]


class AwaitInput(_Frozen):
    """Wait durably for human input (or until `until`, the earliest expiry)."""

    kind: Literal["await_input"] = "await_input"
    waiting_for: tuple[str, ...]
    until: datetime | None = None


class ContinueAsNew(_Frozen):
    kind: Literal["continue_as_new"] = "continue_as_new"


class Finish(_Frozen):
    kind: Literal["finish"] = "finish"
    result: RunResult


Effect = (
    LoadTools
    | DescribeModel
    | CompactContext
    | CheckFinish
    | CallModel
    | RunTools
    | AwaitInput
    | ContinueAsNew
    | Finish
)


# Outcomes --------------------------------------------------------------------------------------


class ToolsLoaded(_Frozen):
    kind: Literal["tools_loaded"] = "tools_loaded"
    catalog: ToolCatalog


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


class CancelRequested(_Frozen):
    kind: Literal["cancel_requested"] = "cancel_requested"
    reason: str = ""


class Steered(_Frozen):
    """A human input arrived (signal or update)."""

    kind: Literal["steered"] = "steered"
    input: SteeringInput


class Boundary(_Frozen):
    """The interpreter is at a step boundary; `now` is workflow time."""

    kind: Literal["boundary"] = "boundary"
    now: datetime


Outcome = (
    ToolsLoaded
    | ModelDescribed
    | ContextCompacted
    | CompactionFailed
    | FinishChecked
    | ModelReplied
    | ModelFailed
    | ToolsFinished
    | CancelRequested
    | Steered
    | Boundary
)
