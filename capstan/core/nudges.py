"""Texts the loop injects to correct the model, and texts of loop-made observations.

Kept apart from the loop so wording can change without touching control flow. Changing a text
changes activity inputs of new runs only; replay compares commands, not payloads.
"""

from __future__ import annotations

__all__ = [
    "finish_bad_arguments",
    "finish_not_alone",
    "text_only_in_tool_mode",
    "unknown_tool",
]


def text_only_in_tool_mode() -> str:
    return (
        "You replied without calling a tool. If the task is done, call the `finish` tool with "
        "your final answer as `answer`. Otherwise call the tool you need next."
    )


def unknown_tool(name: str, available: tuple[str, ...]) -> str:
    return f"unknown tool {name!r}; available tools: {', '.join(available)}"


def finish_bad_arguments(problem: str) -> str:
    return f"`finish` needs a JSON object with a string field `answer`: {problem}"


def finish_not_alone() -> str:
    return (
        "`finish` was not accepted because other tools were called in the same turn. "
        "Look at their results, then call `finish` alone."
    )


def turn_problem(problem: str) -> str:
    return {
        "empty_reply": "Your reply was empty. Answer, or call the tool you need.",
        "reasoning_only": (
            "You only reasoned and did not act. Give your answer, or call the tool you need."
        ),
        "printed_tool_call": (
            "You wrote a tool call as text. Tool calls written in the reply are not run: use the "
            "tool-calling interface to call the tool."
        ),
    }[problem]


def truncated_calls() -> str:
    return (
        "not run: your reply was cut off at the output limit, so this call may be incomplete. "
        "Issue it again with shorter arguments (split large content over several calls)."
    )


def breaker(name: str, count: int) -> str:
    return {
        "identical_call": (
            f"You have made the same call with the same arguments {count} times in a row. It "
            "will give the same result: change approach."
        ),
        "fruitless_calls": (
            f"Your last {count} tool calls returned (almost) nothing. Rethink the approach "
            "before calling more tools."
        ),
        "similar_results": (
            f"{count} calls of the same tool with varied arguments gave results of nearly the "
            "same size. You may be going in circles: step back and rethink."
        ),
    }[name]


def output_invalid(errors: tuple[str, ...], attempts_left: int) -> str:
    """A typed run's answer the output schema refused: each failing JSON path, and how many
    more answers may be refused before the run ends."""
    listed = "; ".join(errors)
    left = f"{attempts_left} more attempt" + ("" if attempts_left == 1 else "s")
    return (
        f"`finish` was not accepted: the answer does not match the required output schema "
        f"({listed}). Call `finish` again with an `answer` that matches it ({left})."
    )


def finish_refused(reason: str) -> str:
    return f"`finish` was not accepted: {reason}. Address this, then call `finish` again."


def finalize() -> str:
    return (
        "You are close to the limit of this run (steps or budget). Wrap up now: finish with "
        "the best answer you have."
    )


def budget_tool_calls() -> str:
    return "not run: the run's tool-call budget is exhausted"
