"""What can go wrong with an MCP server, and which failures a retry can fix.

    McpError
    ├── McpUnavailableError   the server could not be started or reached (connect, handshake)
    │                         `permanent`: a retry cannot help (no such command, bad URL)
    └── McpBrokenError        the connection broke mid-request (the process exited, the
                              stream was cut): the connection is retired, a retry restarts it

Everything else the server says is an answer, not a failure of Capstan's: a tool's error
result, a JSON-RPC error response, a call that did not finish within its timeout, a reply that
is not MCP, structured content that does not match the tool's output schema
(`McpOutputError`, outside the tree: nothing broke). Those become observations the model sees
(see `servers`). Every message here names the server and never a secret: `scrub` removes the
values the worker read from its environment.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "McpBrokenError",
    "McpError",
    "McpOutputError",
    "McpUnavailableError",
    "describe",
    "leaf",
    "scrub",
]


class McpError(Exception):
    """A failure talking to MCP server `server`; the message is one scrubbed line."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


class McpUnavailableError(McpError):
    def __init__(self, server: str, message: str, *, permanent: bool = False) -> None:
        super().__init__(server, message)
        self.permanent = permanent


class McpBrokenError(McpError):
    pass


class McpOutputError(Exception):
    """A result whose structured content does not match the tool's output schema (an answer
    the model is told about, not a failure to talk to the server)."""


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value replaced (longest first, so no part of one survives)."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def describe(exc: BaseException) -> str:
    """One line for an exception, through exception groups (anyio wraps transport errors)."""
    exc = leaf(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside any exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
