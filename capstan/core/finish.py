"""Reading the builtin `finish(answer)` call. Pure."""

from __future__ import annotations

import json

from capstan.core import nudges
from capstan.core.content import Text
from capstan.core.messages import ToolCall

__all__ = ["finish_answer"]


def finish_answer(call: ToolCall) -> tuple[Text, str | None]:
    """The answer of a `finish` call, or the problem with its arguments."""
    if not isinstance(call.arguments, str):
        return call.arguments, None  # a large answer: kept as a ref, resolved by the client
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return "", nudges.finish_bad_arguments(f"not valid JSON ({exc.msg})")
    answer = args.get("answer") if isinstance(args, dict) else None
    if not isinstance(answer, str):
        return "", nudges.finish_bad_arguments("field `answer` is missing or not a string")
    return answer, None
