"""The builtin tools: file access confined to the workspace, paging through large results, and
(with a working jail, `sandbox.py`) running shell and Python code.

`finish` is offered to the model here as a spec only: the pure loop handles it, no activity
ever runs it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from capstan.activities.inline import INLINE_BYTES, INLINE_ENTRIES
from capstan.activities.tools.jail import Jail
from capstan.activities.tools.registry import ToolContext, ToolFunction, tool
from capstan.activities.tools.sandbox import sandbox_tools
from capstan.activities.tools.workspace import Entry, Workspace
from capstan.core.children import DELEGATE_TOOL
from capstan.core.tenants import TENANTS_DIR
from capstan.core.tooling import ASK_USER_TOOL, FINISH_TOOL, READ_RESULT_TOOL, ToolSpec

__all__ = [
    "ASK_USER_SPEC",
    "BUILTIN_TOOLS",
    "FINISH_SPEC",
    "LOOP_TOOL_SPECS",
    "builtin_tools",
    "delegate_spec",
]

FINISH_SPEC = ToolSpec(
    name=FINISH_TOOL,
    description="Finish the task. Call this alone, once, with your final answer.",
    parameters={
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "The final answer."}},
        "required": ["answer"],
        "additionalProperties": False,
    },
    read_only=True,
)

ASK_USER_SPEC = ToolSpec(
    name=ASK_USER_TOOL,
    description=(
        "Ask the user a question and wait for the answer. Use it when you cannot proceed "
        "without a decision or a fact only the user has."
    ),
    parameters={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question to ask."},
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional choices to offer.",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    read_only=True,
)

#: Offered to the model but handled by the loop, never run by an activity.
LOOP_TOOL_SPECS = (FINISH_SPEC, ASK_USER_SPEC)


#: how much of a child's output schema the parent's `delegate` description shows
_SCHEMA_SHOWN = 600


def delegate_spec(
    agents: Sequence[str], outputs: Mapping[str, Mapping[str, Any]] | None = None
) -> ToolSpec:
    """`delegate(agent, task)`, offered to a run that may delegate to `agents`. Handled by the
    loop and the workflow (a child run), never by an activity. `read_only` because the child's
    own calls pass its own gate; `untrusted_output` because its answer may carry what it read
    (fenced for the model, and counted by the Rule of Two). `outputs`: the output schemas of
    the agents that answer with JSON (typed results), which the description states."""
    typed = "".join(
        f" The {name} agent answers with JSON matching this schema: "
        f"{json.dumps(schema, separators=(',', ':'))[:_SCHEMA_SHOWN]}."
        for name, schema in sorted((outputs or {}).items())
    )
    return ToolSpec(
        name=DELEGATE_TOOL,
        description=(
            "Hand a task to another agent and wait for its final answer, which is this call's "
            "result (or how and why it stopped). The agent works alone with its own tools and "
            "a share of your remaining budget; it does not see this conversation, so say "
            "everything it needs in the task. Several delegate calls in one reply run in "
            "parallel." + typed
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "enum": list(agents),
                    "description": "The agent to delegate to.",
                },
                "task": {"type": "string", "description": "What the agent should do."},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
        read_only=True,
        untrusted_output=True,
    )


MAX_READ_CHARS = 200_000


def _workspace(ctx: ToolContext) -> Workspace:
    """The run's workspace (`ctx.workspace`: the root, or its tenant's or thread's own), where
    the other tenants' workspaces below the root do not exist."""
    return Workspace(ctx.workspace, hidden=frozenset({TENANTS_DIR}))


@tool(read_only=True, untrusted_output=True)
async def read_file(ctx: ToolContext, path: str) -> str:
    """Read a UTF-8 text file from the workspace.

    Args:
        path: Path relative to the workspace root.
    """
    workspace = _workspace(ctx)
    small = workspace.read_text(path, MAX_READ_CHARS, at_most=INLINE_BYTES)
    if small is not None:
        return small
    return await asyncio.to_thread(workspace.read_text, path, MAX_READ_CHARS)


@tool
async def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Write a UTF-8 text file in the workspace, replacing it if it exists.

    Args:
        path: Path relative to the workspace root; parent directories are created.
        content: The full new content of the file.
    """
    workspace = _workspace(ctx)
    written = workspace.write_text(path, content, at_most=INLINE_BYTES)
    if written is None:
        written = await asyncio.to_thread(workspace.write_text, path, content)
    return f"wrote {written} bytes to {path}"


# Fenced like file contents: whoever can create files chooses their names.
@tool(read_only=True, untrusted_output=True)
async def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """List the entries of a workspace directory, directories first, with file sizes.

    Args:
        path: Directory relative to the workspace root.
    """
    workspace = _workspace(ctx)
    entries = workspace.entries(path, at_most=INLINE_ENTRIES)
    if entries is None:
        entries = await asyncio.to_thread(workspace.entries, path)
    entries.sort(key=lambda e: (e.kind != "dir", e.name))
    return "\n".join(map(_listing_line, entries)) or "(empty directory)"


def _listing_line(entry: Entry) -> str:
    # A name with a line break or an invisible character is shown escaped, so it can neither
    # fake further entries nor hide what it is.
    name = entry.name if entry.name.isprintable() else repr(entry.name)
    match entry.kind:
        case "dir":
            return f"{name}/"
        case "file":
            return f"{name} ({entry.size} bytes)"
        case "symlink":
            return f"{name} (symlink, not followed)"
        case _:
            return f"{name} (special file)"


@tool(read_only=True, untrusted_output=True)
async def read_result(ctx: ToolContext, ref: str, offset: int = 0, limit: int = 8000) -> str:
    """Read part of a large earlier result by its ref (the sha256 named in a truncation note).

    Args:
        ref: The sha256 of the stored result.
        offset: Character offset to start from.
        limit: Maximum number of characters to return.
    """
    text = await asyncio.to_thread(lambda: ctx.content.read_bytes(ref).decode("utf-8"))
    offset = max(offset, 0)
    limit = max(1, min(limit, 50_000))
    chunk = text[offset : offset + limit]
    end = offset + len(chunk)
    more = f" More: {READ_RESULT_TOOL}(ref={ref!r}, offset={end})." if end < len(text) else ""
    return f"[characters {offset}-{end} of {len(text)}.{more}]\n{chunk}"


BUILTIN_TOOLS: list[ToolFunction] = [read_file, write_file, list_dir, read_result]


def builtin_tools(jail: Jail | None = None) -> list[ToolFunction]:
    """The builtins, with `run_shell` / `run_python` when the worker has a working jail."""
    return [*BUILTIN_TOOLS, *(sandbox_tools(jail) if jail is not None else [])]
