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
