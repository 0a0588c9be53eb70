"""Capstan's name for an MCP tool: `<server>__<tool>`, one name on the wire, in history and policy.

Providers accept tool names matching `^[a-zA-Z0-9_-]{1,64}$` (OpenAI and Anthropic alike), so the
dotted `git.status` cannot reach a model; rather than a second, wire-safe spelling mapped back in
every adapter, the catalog, the policy file, `allowed_tools`, the audit and the model all use
`git__git_status`. Server names never contain `__` (the config checks it), so the first `__`
splits a name. A tool name the wire refuses (MCP allows `.`, `/` and up to 128 characters) is
made safe and given a digest of the original, so two tools never share a name; the server's
listing maps it back. Pure.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "server_of", "wire_name"]

SEPARATOR = "__"
MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST = 8


def wire_name(server: str, tool: str) -> str:
    """The name the model calls the server's tool `tool` by."""
    plain = f"{server}{SEPARATOR}{tool}"
    safe = _UNSAFE.sub("_", tool)
    if safe == tool and len(plain) <= MAX_TOOL_NAME:
        return plain
    digest = hashlib.sha256(tool.encode("utf-8")).hexdigest()[:_DIGEST]
    room = MAX_TOOL_NAME - len(server) - len(SEPARATOR) - _DIGEST - 1
    return f"{server}{SEPARATOR}{safe[:room]}_{digest}"


def server_of(name: str) -> str | None:
    """The server prefix of `name`, or None when it names no MCP tool."""
    server, separator, rest = name.partition(SEPARATOR)
    return server if separator and server and rest else None
