"""Long-lived MCP sessions, one per server per worker process, restarted when they break.

A stdio server is a process: starting one per call would cost a second or more and lose
whatever the server keeps in memory, so each worker keeps one session per server (`McpPool`)
and every run on that worker shares it. Sessions are per worker, not per run: a run's calls
may land on any worker (after a crash, or with several workers), so a server must not hold a
run's state in memory between calls. Each call carries the run id and the idempotency key in
its `_meta` for a server that wants to key state or effects by them.

The SDK's `Client` is an anyio context: it must be entered and left by one task. Each
`McpConnection` therefore owns a task that opens the session, waits until told to stop, and
closes it; activities only send requests through it. A connection that broke (the process
exited, the stream was cut, the server stopped answering) is retired: taken out of the pool
and closed in the background, so the next call starts or dials the server afresh.

The SDK checks a result's structured content against the tool's output schema with
jsonschema and Python's `re`, on the worker's event loop: a server's `pattern` could stall
every run on the worker. Each session's check is Capstan's instead (`capstan.core.schemas`:
RE2, nothing fetched, bounded work, off the event loop), against the output schemas of the
listings this connection made; content that does not match is `McpOutputError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from mcp import Client, MCPError
from mcp.client import IncomingMessage
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    RequestParamsMeta,
)
from mcp.types import Tool as McpTool
from pydantic import ValidationError

from capstan.activities.tools.mcp.config import McpConfig, McpServerConfig
from capstan.activities.tools.mcp.errors import (
    McpOutputError,
    McpUnavailableError,
    describe,
    leaf,
    scrub,
)
from capstan.activities.tools.mcp.transport import secrets_of, transport_for
from capstan.core import schemas

__all__ = ["McpConnection", "McpPool"]

CLIENT_INFO = Implementation(name="capstan", version="0.1.0")
_MAX_PAGES = 100
_PROBE_SECONDS = 3.0


class McpConnection:
    """One open session with one server, owned by its own task."""

    def __init__(self, server: McpServerConfig, env: Mapping[str, str]) -> None:
        self.server = server
        self.secrets = secrets_of(server, env)
        self.retired = False
        #: the last thing the server wrote that is not MCP (a banner, a stray print)
        self.noise: str | None = None
        self._env = env
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        #: the server's tool name -> its output schema, from this connection's listings
        self._output_schemas: dict[str, dict[str, Any] | None] = {}

    @property
    def usable(self) -> bool:
        return not self.retired and self._owner is not None and not self._owner.done()

    async def open(self) -> None:
        """Start or dial the server and complete the handshake, within the connect timeout."""
        self._owner = asyncio.create_task(self._own(), name=f"mcp {self.server.name}")
        try:
            async with asyncio.timeout(self.server.connect_timeout_seconds):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            limit = self.server.connect_timeout_seconds
            problem = f"did not complete the MCP handshake within {limit:g} s"
            raise self.unavailable(problem + self.noise_note()) from None
        except BaseException as exc:
            await self.close()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise self.unavailable(describe(exc), permanent=_permanent(exc)) from None

    async def close(self) -> None:
        self.retired = True
        self._stop.set()
        if self._owner is None:
            return
        if not self._ready.done():
            self._owner.cancel()
        with contextlib.suppress(BaseException):
            await self._owner
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # seen: a failed start is reported by `open`, not logged

    async def list_tools(self) -> list[McpTool]:
        """Every tool the server lists (all pages), within the connect timeout."""
        client = await self._client()
        tools: list[McpTool] = []
        cursor: str | None = None
        async with asyncio.timeout(self.server.connect_timeout_seconds):
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    break
        self._output_schemas = {t.name: t.output_schema for t in tools}
        return tools

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any], timeout: float
    ) -> CallToolResult:
        client = await self._client()
        return await client.call_tool(
            tool, arguments, read_timeout_seconds=timeout, meta=cast(RequestParamsMeta, meta)
        )

    async def responsive(self) -> bool:
        """Whether the server still answers anything (after a call timed out)."""
        try:
            async with asyncio.timeout(_PROBE_SECONDS):
                await (await self._client()).list_tools(cache_mode="refresh")
        except MCPError as exc:  # an error response is an answer
            return exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
        except Exception:
            return False
        return True

    def unavailable(self, problem: str, *, permanent: bool = False) -> McpUnavailableError:
        what = "start" if self.server.transport == "stdio" else "reach"
        message = f"cannot {what} MCP server {self.server.name}: {problem}"
        return McpUnavailableError(
            self.server.name, scrub(message, self.secrets), permanent=permanent
        )

    def noise_note(self) -> str:
        return f" (it wrote output that is not MCP: {self.noise!r})" if self.noise else ""

    async def _client(self) -> Client:
        return await asyncio.shield(self._ready)

    async def _own(self) -> None:
        client = Client(
            transport_for(self.server, self._env),
            cache=None,  # history is the record of what a server said; never a stale answer
            client_info=CLIENT_INFO,
            message_handler=self._on_message,
        )
        try:
            async with client:
                # the SDK's own check would match the server's regexes with `re` on this loop
                client.session.validate_tool_result = self._check_output  # type: ignore[method-assign]
                self._ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._ready.cancel()
            self.retired = True
            raise
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            self.retired = True

    async def _check_output(self, name: str, result: CallToolResult) -> None:
        """What the SDK's `validate_tool_result` checks, with Capstan's validator."""
        schema = self._output_schemas.get(name)
        if schema is None:
            return
        content = result.structured_content
        if content is None:
            raise McpOutputError(
                f"tool {name} has an output schema but returned no structured content"
            )
        checked = await asyncio.to_thread(schemas.check, schema, content)
        problems = [checked.refused] if checked.refused else list(checked.errors)
        if problems:
            shown = scrub("; ".join(problems), self.secrets)
            raise McpOutputError(f"the result of {name} does not match its output schema: {shown}")

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self.noise = _noise(message)


class McpPool:
    """The worker's open sessions, one per server, opened on first use."""

    def __init__(self, config: McpConfig, env: Mapping[str, str]) -> None:
        self.config = config
        self.env = env
        self._live: dict[str, McpConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def connection(self, server: str) -> McpConnection:
        """The server's open session, started or dialled now if there is none."""
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            live = self._live.get(server)
            if live is not None and live.usable:
                return live
            fresh = McpConnection(self.config.servers[server], self.env)
            await fresh.open()
            self._live[server] = fresh
            return fresh

    def retire(self, connection: McpConnection) -> None:
        """Stop using `connection`; close it in the background (a stdio server gets seconds to
        exit before it is killed, which a failing call should not wait for)."""
        connection.retired = True
        if self._live.get(connection.server.name) is connection:
            del self._live[connection.server.name]
        task = asyncio.create_task(connection.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        live, self._live = list(self._live.values()), {}
        await asyncio.gather(*(c.close() for c in live), *self._closing, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """Around a worker's run: every server process is stopped when the worker stops."""
        try:
            yield
        finally:
            await asyncio.shield(self.close())


def _permanent(exc: BaseException) -> bool:
    """A failure to start that a retry cannot fix: no such program, not executable, bad URL."""
    cause = leaf(exc)
    return isinstance(cause, FileNotFoundError | PermissionError | NotADirectoryError) or (
        type(cause).__name__ in ("UnsupportedProtocol", "InvalidURL")
    )


def _noise(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        shown = errors[0].get("input") if errors else None
        if isinstance(shown, str | bytes):
            text = shown.decode("utf-8", "replace") if isinstance(shown, bytes) else shown
            return text[:120]
    return describe(exc)[:120]
