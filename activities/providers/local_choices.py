"""Argument choices for the bundled model: each call's schema offers only what exists.

The `local` provider asks for structured tool calls (a JSON schema that llama.cpp turns into a
grammar). A 135M-parameter model given free strings makes up absolute paths and paraphrases
what it read, so for `local` profiles the schema of each call is narrowed, from the run's own
facts, to choices:

1. a `path` argument of a read-only tool: one of the workspace's files (of a directory
   argument, one that defaults to ".": "." or one of the workspace's directories);
2. a `path` argument of a tool that changes state: a workspace file or a file name that the
   run's instructions (system prompt, task, user messages) mention;
3. a `content` argument of a tool that changes state, and `finish`'s answer: a line of a file
   the run has read (the results of read-only tools with a file `path`). Until the run has
   read something there is no such line, so those tools are not offered: the model reads first;
4. a path a read-only tool was already called with since the run last changed anything is not
   offered again (its result is in the conversation; a tiny model otherwise rereads forever);
5. right after the run refused a `finish` (a finish guard), `finish` is not offered: the
   refusal said what to do first, and a tiny model would only repeat itself;
6. a write is not offered a path where every allowed content would change nothing (the file
   already holds exactly that line): a tiny model copies a line back where it found it.

The model still chooses the tool, the file and the line; the schema only rules out what cannot
be right. Rules 3, 5 and 6 fit one kind of task (copying what was read), so they are on only
with `CAPSTAN_LOCAL_CHOICES=lines` (the demo sets it); the default, `paths`, narrows paths only
(1, 2, 4) and leaves the content of writes and the answer free; `off` narrows nothing. Larger
models keep free text: `capstan.activities.model` applies this only to the `local` provider.
The one IO here is listing the workspace (`workspace_listing`, no-follow).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from capstan.activities.fence import FENCE_TAG
from capstan.activities.providers.base import RenderedMessage
from capstan.core.tooling import FINISH_TOOL, ToolSpec

__all__ = [
    "MAX_CHOICES",
    "Choices",
    "choices_for",
    "narrow_for_call",
    "narrow_tools",
    "workspace_listing",
]

#: Enough for a small workspace; a grammar with thousands of alternatives is slow to build.
MAX_CHOICES = 64
MAX_LINE_CHARS = 300
_FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})(?![\w/-])")


class Choices:
    """What one call's arguments may be: files and directories, names the instructions give,
    lines read. `read`: paths already read, not offered to read-only tools again."""

    def __init__(
        self,
        listing: tuple[Sequence[str], Sequence[str]],
        named: Sequence[str],
        lines: Sequence[str],
        read: Iterable[str] = (),
    ) -> None:
        files, dirs = listing
        seen = set(read)
        self.files = _capped(f for f in files if f not in seen)
        self.dirs = _capped(d for d in (".", *dirs) if d not in seen)
        self.targets = _capped([*files, *named])
        #: None: the content of writes and the answer are left free
        self.lines: list[str] | None = _capped(lines)
        self.finish_refused = False


def choices_for(
    listing: tuple[Sequence[str], Sequence[str]],
    messages: Sequence[RenderedMessage],
    read_only: set[str],
    readers: set[str],
) -> Choices:
    """The choices of one call: the workspace's (files, directories) and the conversation;
    `read_only`: the tools that change nothing, `readers`: those of them that read a file."""
    named = [n for m in messages if m.role in ("system", "user") for n in _names(m.content)]
    lines = [
        line
        for m in messages
        if m.role == "tool" and m.name in readers and not m.is_error
        for line in _data_lines(m.content)
    ]
    choices = Choices(listing, named, lines, _read_since_change(messages, read_only))
    last = messages[-1] if messages else None
    choices.finish_refused = (
        last is not None and last.role == "tool" and last.name == FINISH_TOOL and last.is_error
    )
    return choices


def _read_since_change(messages: Sequence[RenderedMessage], read_only: set[str]) -> set[str]:
    """The paths read-only tools were called with since the last call that changed state."""
    paths: set[str] = set()
    for m in messages:
        for call in m.tool_calls:
            if call.name not in read_only and call.name != FINISH_TOOL:
                paths.clear()
                continue
            with contextlib.suppress(ValueError, AttributeError):
                path = json.loads(call.arguments).get("path", ".")
                if isinstance(path, str):
                    paths.add(path)
    return paths


def narrow_for_call(
    tools: Sequence[ToolSpec],
    workspace: Path,
    messages: Sequence[RenderedMessage],
    *,
    lines: bool = True,
) -> list[ToolSpec]:
    """One call's tools, narrowed to the workspace's files and what the run has read. With
    `lines` off (`CAPSTAN_LOCAL_CHOICES=paths`) only paths are narrowed (rules 1, 2 and 4): the
    content of a write and the answer stay free text, for tasks that are not copying."""
    read_only = {t.name for t in tools if t.read_only}
    readers = {t.name for t in tools if t.read_only and _reads_files(t)}
    choices = choices_for(workspace_listing(workspace), messages, read_only, readers)
    if not lines:
        choices.lines, choices.finish_refused = None, False
        return narrow_tools(tools, choices) or list(tools)
    choices.targets = [p for p in choices.targets if not _holds_only(workspace / p, choices.lines)]
    narrowed = narrow_tools(tools, choices)
    return narrowed or list(tools)  # nothing could be called: free text beats no schema


def _holds_only(path: Path, lines: Sequence[str] | None) -> bool:
    """True when writing any of `lines` to `path` would leave it as it is."""
    if lines is None or len(set(lines)) != 1:
        return False
    try:
        if path.is_symlink() or path.stat().st_size > MAX_LINE_CHARS * 4 + 1:
            return False
        return path.read_text(encoding="utf-8").strip() == lines[0]
    except (OSError, UnicodeDecodeError):
        return False


def _reads_files(tool: ToolSpec) -> bool:
    """A read-only tool whose `path` names a file (not a directory, which has a default)."""
    path = (tool.parameters.get("properties") or {}).get("path")
    return isinstance(path, dict) and "default" not in path


def workspace_listing(root: Path) -> tuple[list[str], list[str]]:
    """Regular files and directories under `root` as relative POSIX paths, sorted, hidden ones
    and symlinks left out, at most `MAX_CHOICES` each; nothing when there is no workspace."""
    files: list[str] = []
    folders: list[str] = []
    for folder, dirs, names in os.walk(root):  # os.walk does not follow directory symlinks
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and not (Path(folder) / d).is_symlink()
        )
        base = Path(folder)
        folders += [(base / d).relative_to(root).as_posix() for d in dirs]
        for name in sorted(names):
            path = base / name
            if not name.startswith(".") and not path.is_symlink() and path.is_file():
                files.append(path.relative_to(root).as_posix())
        if len(files) >= MAX_CHOICES:
            break
    return files[:MAX_CHOICES], folders[:MAX_CHOICES]


def narrow_tools(tools: Sequence[ToolSpec], choices: Choices) -> list[ToolSpec]:
    """The tools with their arguments narrowed to `choices`; a tool that has nothing it could be
    called with is left out, and `finish` comes last (a tiny model favours the first name)."""
    offered = [t for t in tools if not (choices.finish_refused and t.name == FINISH_TOOL)]
    narrowed = [t for t in (_narrow(t, choices) for t in offered) if t is not None]
    return sorted(narrowed, key=lambda t: t.name == FINISH_TOOL)


def _narrow(tool: ToolSpec, choices: Choices) -> ToolSpec | None:
    properties: dict[str, Any] = dict(tool.parameters.get("properties") or {})
    changed = False
    for name, schema in properties.items():
        options = _options(tool, name, schema, choices)
        if options is None:
            continue
        if not options:
            return None
        properties[name] = {**_without_type(schema), "enum": options}
        changed = True
    if not changed:
        return tool
    return tool.model_copy(update={"parameters": {**tool.parameters, "properties": properties}})


def _options(tool: ToolSpec, name: str, schema: Any, choices: Choices) -> list[str] | None:
    """The allowed values of one string argument, or None to leave it free."""
    if not isinstance(schema, dict) or schema.get("type") != "string":
        return None
    if tool.name == FINISH_TOOL:
        return choices.lines if name == "answer" else None  # None too when lines are free
    if name == "path" and "default" in schema:  # a directory: list_dir's defaults to "."
        return choices.dirs if tool.read_only else None
    if name == "path":
        return choices.files if tool.read_only else choices.targets
    if name == "content" and not tool.read_only:
        return choices.lines
    return None


def _without_type(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("type", "title", "default")}


def _names(text: str) -> list[str]:
    return _FILE_NAME.findall(text)


def _data_lines(text: str) -> list[str]:
    """The non-empty lines of a tool result; of a fenced one, only those inside the fence."""
    lines = text.splitlines()
    if lines and lines[0].startswith(f"<{FENCE_TAG}"):
        lines = lines[2:-2]  # the tag and the notice; the boundary and the closing tag
    return [ln.strip() for ln in lines if ln.strip() and len(ln.strip()) <= MAX_LINE_CHARS]


def _capped(values: Iterable[str]) -> list[str]:
    """Unique, in first-seen order, at most `MAX_CHOICES`."""
    return list(dict.fromkeys(values))[:MAX_CHOICES]
