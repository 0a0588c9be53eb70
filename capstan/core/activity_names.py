"""The name of each activity a run calls: what it is registered and recorded under.

A module of its own so a client that only reads which activity a run waits on (`capstan status`
of a model call held back by its provider) does not load the activities' input and result models
with `capstan.core.activity_table`, which pairs each name with its types and options.

The names are recorded in history: never rename one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ActivityName"]


class ActivityName(StrEnum):
    LIST_TOOLS = "list_tools"
    DESCRIBE_MODEL = "describe_model"
    CALL_MODEL = "call_model"
    RUN_TOOL = "run_tool"
    COMPACT_CONTEXT = "compact_context"
    CHECK_FINISH = "check_finish"
    NOTIFY_REQUEST = "notify_request"
    SPILL_MESSAGES = "spill_messages"
    TAKE_MESSAGES = "take_messages"
