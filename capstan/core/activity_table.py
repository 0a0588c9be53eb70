"""Every activity a run calls: its frozen name, its input and result types, and its options.

Defined once here; the workflow turns `ActivityOptions` into Temporal's retry policy and
timeouts, the activities register under `ActivityName`, and history decoding reads the types.
Pure data: no Temporal import (the workflow does the conversion).

The names are recorded in history: never rename one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
from capstan.core.inbox import InboxQueue, SpillInput, TakeInput, TakenMessages
from capstan.core.model_errors import NON_RETRYABLE
from capstan.core.models import ModelChain
from capstan.core.notifications import NotifyInput, NotifyResult
from capstan.core.spec import ActivityTuning
from capstan.core.tooling import ToolCatalog, ToolOutcome

__all__ = ["ACTIVITIES", "ActivityDef", "ActivityOptions"]


class ActivityOptions(BaseModel):
    """Timeouts (seconds) and retries of one activity call. `max_retry` None: Temporal's
    default (100 times the initial interval)."""

    model_config = ConfigDict(frozen=True)

    start_to_close: float
    heartbeat: float | None = None
    max_attempts: int
    initial_retry: float = 1.0
    max_retry: float | None = None
    non_retryable: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActivityDef:
    name: ActivityName
    input: type[Any]
    result: Any  # a type, or an annotated union (tool outcomes)
    options: Callable[[ActivityTuning, float | None], ActivityOptions]


#: A blob store that refuses us, is missing or cannot decrypt will not heal by retrying: the
#: run ends with the one-line reason at once (a missing single blob stays retryable).
STORE_FAILURES = ("BlobAccessError", "BlobStoreMissingError", "BlobKeyError")
_MODEL_NON_RETRYABLE = (*sorted(NON_RETRYABLE), *STORE_FAILURES)


def _model(tuning: ActivityTuning, _: float | None) -> ActivityOptions:
    return ActivityOptions(
        start_to_close=tuning.model_start_to_close,
        heartbeat=tuning.model_heartbeat,
        max_attempts=tuning.model_max_attempts,
        initial_retry=tuning.model_initial_retry,
        max_retry=tuning.model_max_retry,
        non_retryable=_MODEL_NON_RETRYABLE,
    )


def _tool(tuning: ActivityTuning, timeout: float | None) -> ActivityOptions:
    return ActivityOptions(
        start_to_close=timeout or tuning.tool_default_timeout,
        heartbeat=tuning.tool_heartbeat,
        max_attempts=tuning.tool_max_attempts,
        initial_retry=tuning.tool_initial_retry,
        non_retryable=STORE_FAILURES,
    )


def _fixed(**options: Any) -> Callable[[ActivityTuning, float | None], ActivityOptions]:
    fixed = ActivityOptions(**options)
    return lambda _tuning, _timeout: fixed


ACTIVITIES: dict[ActivityName, ActivityDef] = {
    d.name: d
    for d in (
        ActivityDef(
            ActivityName.LIST_TOOLS,
            ListToolsInput,
            ToolCatalog,
            _fixed(start_to_close=30, max_attempts=5, non_retryable=STORE_FAILURES),
        ),
        ActivityDef(
            ActivityName.DESCRIBE_MODEL,
            DescribeModelInput,
            ModelChain,
            _fixed(start_to_close=30, max_attempts=3, non_retryable=_MODEL_NON_RETRYABLE),
        ),
        ActivityDef(ActivityName.CALL_MODEL, CallModelInput, ModelReply, _model),
        ActivityDef(ActivityName.COMPACT_CONTEXT, CompactInput, CompactResult, _model),
        ActivityDef(
            ActivityName.CHECK_FINISH,
            CheckFinishInput,
            FinishVerdict,
            _fixed(start_to_close=60, max_attempts=3, non_retryable=STORE_FAILURES),
        ),
        ActivityDef(ActivityName.RUN_TOOL, RunToolInput, ToolOutcome, _tool),
        # live messages past the inline inbox (`capstan.core.inbox`): the blob store's own
        # failures (refused, missing, undecryptable) end the run at once, anything else is
        # tried for ~2 minutes; the messages stay in the run meanwhile
        ActivityDef(
            ActivityName.SPILL_MESSAGES,
            SpillInput,
            InboxQueue,
            _fixed(start_to_close=30, max_attempts=8, max_retry=30.0, non_retryable=STORE_FAILURES),
        ),
        ActivityDef(
            ActivityName.TAKE_MESSAGES,
            TakeInput,
            TakenMessages,
            _fixed(start_to_close=30, max_attempts=8, max_retry=30.0, non_retryable=STORE_FAILURES),
        ),
        # fire and forget: ~1+2+4+8 s of backoff over 5 attempts; a hook that refuses the
        # request (4xx but 408/429) or a missing secret does not heal by retrying
        ActivityDef(
            ActivityName.NOTIFY_REQUEST,
            NotifyInput,
            NotifyResult,
            _fixed(
                start_to_close=20,
                max_attempts=5,
                initial_retry=1.0,
                max_retry=30.0,
                non_retryable=("WebhookRejectedError",),
            ),
        ),
    )
}
