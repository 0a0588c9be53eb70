"""Repair tool-call argument JSON, but only where the repair is unambiguous.

Written by hand on purpose: general JSON repair libraries guess (they quote bare words, invent
values, reorder). Here a repair is accepted only when exactly one reading exists:

- empty arguments mean `{}`;
- a Markdown code fence around the object is removed;
- commas directly before `}` or `]` (outside strings) are removed;
- brackets left open at the very end (outside a string) are closed, innermost first.

Anything else is returned unchanged, and the tool reports the JSON error to the model.
"""

from __future__ import annotations

import json
import re

__all__ = ["repair_arguments"]

_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _scan(text: str) -> tuple[str, list[str], bool]:
    """Drop trailing commas; return the text, the brackets still open, and whether a string is."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            if stack and stack[-1] == ch:
                stack.pop()
        out.append(ch)
    return "".join(out), stack, in_string


def repair_arguments(text: str) -> tuple[str, bool]:
    """`(arguments, repaired)`: valid JSON is returned as is; see the module doc for repairs."""
    if _is_object(text):
        return text, False
    candidate = text.strip()
    if not candidate:
        return "{}", True
    fenced = _FENCE.match(candidate)
    if fenced:
        candidate = fenced.group(1).strip()
    candidate, still_open, in_string = _scan(candidate)
    if still_open and not in_string and candidate.startswith("{"):
        candidate = candidate.rstrip().rstrip(",") + "".join(reversed(still_open))
    if _is_object(candidate):
        return candidate, True
    return text, False
