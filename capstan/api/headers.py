"""The request headers the API reads, checked before anything reads them: printable ASCII of a
bounded length, or one 422 in the API's error shape naming the header.

Starlette decodes header bytes as Latin-1, so a UTF-8 value arrives as text that string methods
misjudge (`"²".isdigit()` is true and `int("²")` raises: a `Last-Event-ID` of `²` was a 500).
Checking the raw bytes of every header a route, the inbox or FastAPI itself reads, in one
place, spares every reader its own check. A header nobody here reads is left alone.

The `Cookie` header is bounded but not held to ASCII: a browser sends every cookie of the host
(on `localhost`, those of every other application on any port), and another application's
cookie must not lock anyone out of the inbox; the inbox's own cookie holds a token, and a token
that is not one of ours is refused as any other (401).

Must never log or echo a header's value (`Authorization` and `Cookie` carry tokens).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from capstan.api.errors import ApiError, error_response

__all__ = ["HEADER_LIMITS", "HeaderGuard", "header_problem"]

#: every header the API reads, with the most bytes its value may have
HEADER_LIMITS: dict[bytes, int] = {
    b"authorization": 4096,
    b"cookie": 8192,
    b"origin": 2048,
    b"referer": 4096,
    b"host": 1024,
    b"last-event-id": 20,
    b"x-capstan-request": 64,
    b"content-type": 256,
    b"content-length": 20,
    # the protocol front doors: MCP (`/mcp`) and A2A (`/a2a/{agent}/`)
    b"mcp-session-id": 128,
    b"mcp-protocol-version": 32,
    b"a2a-version": 16,
    b"a2a-extensions": 2048,
    b"x-a2a-extensions": 2048,
}
#: headers whose value may hold bytes beyond ASCII (see the module's docstring)
_ANY_BYTES = frozenset({b"cookie"})


def _printable(value: bytes) -> bool:
    return all(0x20 <= b <= 0x7E or b == 0x09 for b in value)


def header_problem(name: bytes, value: bytes) -> str | None:
    """What is wrong with one header (`name` in lower case), or None."""
    limit = HEADER_LIMITS.get(name)
    if limit is None:
        return None
    shown = name.decode("ascii").title()
    if len(value) > limit:
        return f"the {shown} header is longer than {limit} bytes"
    if name not in _ANY_BYTES and not _printable(value):
        return f"the {shown} header must be printable ASCII"
    return None


class HeaderGuard:
    """ASGI middleware: refuse a request whose read headers break `HEADER_LIMITS` (422)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for raw_name, value in scope.get("headers", []):
                name = bytes(raw_name).lower()
                problem = header_problem(name, bytes(value))
                if problem is not None:
                    field = f"header.{name.decode('ascii', 'replace')}"
                    error = ApiError(422, "invalid", problem, field=field)
                    await error_response(error)(scope, receive, send)
                    return
        await self.app(scope, receive, send)
