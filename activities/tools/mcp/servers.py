"""MCP servers as a tool source of the `list_tools` and `run_tool` activities.

`listing` asks every server a run may use for its tools, once, when the run starts: the specs
(name, description, input schema, annotations) go into the run's catalog, so the catalog is in
history and a replay never asks a live server. A server that cannot be reached leaves a
diagnostic and no tools, unless the run's `allowed_tools` names its tools: then the listing
fails with the reason, and so does the run.

`call` runs one call, with the idempotency key and run id in the request's `_meta`, heartbeats
and cancellation from the activity. The error taxonomy:

- the tool answered with `isError`, or the server answered with a JSON-RPC error (unknown tool,
  bad arguments, its own failure): `ToolFailed`, an observation the model reads;
- no answer within the server's `timeout_seconds`: `ToolFailed` (timeout); the request is
  cancelled, and a server that no longer answers anything is restarted;
- the server cannot be started at all (no such command, a bad URL): `ToolFailed`;
- the server cannot be reached now, or the connection broke mid-call (the process exited, the
  stream was cut): `McpBrokenError`, so the activity fails and Temporal retries it on a fresh
  connection; when the retries run out, the model sees the reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import anyio
import httpx2
from mcp import MCPError
from mcp.client.streamable_http import StreamableHTTPError
from mcp.types import CONNECTION_CLOSED, INVALID_PARAMS, REQUEST_TIMEOUT
from mcp.types import Tool as McpTool
from pydantic import ValidationError
from temporalio.plugin import SimplePlugin

from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.tools.mcp.catalog import call_timeout, tool_rule, tool_spec
from capstan.activities.tools.mcp.config import McpConfig, McpServerConfig
from capstan.activities.tools.mcp.connection import McpConnection, McpPool
from capstan.activities.tools.mcp.errors import (
    McpBrokenError,
    McpError,
    McpOutputError,
    McpUnavailableError,
    describe,
    leaf,
    scrub,
)
from capstan.activities.tools.mcp.listing import McpListing, McpRequiredError
from capstan.activities.tools.mcp.naming import SEPARATOR, server_of
from capstan.activities.tools.mcp.results import result_text
from capstan.core.activity_io import RunToolInput
from capstan.core.schemas import schema_problem
from capstan.core.tooling import READ_RESULT_TOOL, ToolFailed, ToolFailure, ToolSpec, ToolSucceeded
from capstan.runtime.blobstore import ContentStore

__all__ = ["IDEMPOTENCY_META", "LISTING_SECONDS", "RUN_META", "McpServers"]

log = logging.getLogger("capstan.mcp")

#: `_meta` keys every call carries: a server may apply an effect once per key.
IDEMPOTENCY_META = "capstan/idempotency_key"
RUN_META = "capstan/run_id"
_ERROR_INLINE_CHARS = 2000
#: A server's start and listing, all servers at once, within the `list_tools` activity's 30 s.
LISTING_SECONDS = 25.0
#: A connection that broke: the server process exited, the stream or the HTTP exchange was cut.
_TRANSPORT_ERRORS = (
    MCPError,  # what is left of it here: CONNECTION_CLOSED
    McpError,
    OSError,
    EOFError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    httpx2.HTTPError,
    StreamableHTTPError,
)


class McpServers:
    """Every configured MCP server, behind one pool of sessions per worker (`McpTools`'s
    implementation: the only importer of the MCP SDK)."""

    def __init__(self, config: McpConfig, env: Mapping[str, str], content: ContentStore) -> None:
        self.config = config
        self.pool = McpPool(config, env)
        self.content = content
        #: per server: Capstan's tool name -> the server's, from the last listing on this worker
        self._names: dict[str, dict[str, str]] = {}

    def plugin(self) -> SimplePlugin:
        """Ties the servers' lifetime to the worker's: every session is closed (every stdio
        server stopped) when the worker stops."""
        return SimplePlugin("capstan.mcp", run_context=self.pool.lifetime)

    async def listing(self, allowed: Sequence[str] | None) -> McpListing:
        """The tools of every server `allowed` may use (all, when None)."""
        wanted = [s for s in self.config.servers.values() if _wanted(s.name, allowed)]
        listed = await asyncio.gather(*map(self._list_within, wanted), return_exceptions=True)
        out = McpListing()
        for server, result in zip(wanted, listed, strict=True):
            if isinstance(result, BaseException):
                self._unlisted(server, result, allowed, out)
                continue
            for spec in result:
                if allowed is None or _allows(allowed, spec.name):
                    _offer(server, spec, out)
        out.diagnostics += _not_offered(allowed, out.specs, self.config)
        return out

    async def call(self, request: RunToolInput) -> ToolSucceeded | ToolFailed:
        """Run one call of an MCP tool; see the module docstring for what can come back.

        Heartbeats cover all of it (starting a server, the call, a probe after a timeout), and
        a cancelled activity cancels the MCP request (the SDK tells the server)."""
        return await with_heartbeat(self._call(request))

    async def _call(self, request: RunToolInput) -> ToolSucceeded | ToolFailed:
        server = self.config.servers[server_of(request.name) or ""]
        try:
            arguments = _arguments(await asyncio.to_thread(self.content.resolve, request.arguments))
        except ValueError as exc:
            return _failed(request, "invalid_arguments", str(exc))
        try:
            connection = await self.pool.connection(server.name)
            tool = await self._tool_name(connection, request.name)
        except McpUnavailableError as exc:
            if exc.permanent:
                return _failed(request, "error", str(exc))
            raise McpBrokenError(server.name, str(exc)) from None
        if tool is None:
            return _failed(request, "denied", f"{request.name} is not offered by this worker")
        meta = {IDEMPOTENCY_META: request.idempotency_key, RUN_META: request.run_id}
        timeout = call_timeout(server, tool)
        try:
            result = await connection.call(tool, arguments, meta, timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._call_failed(request, connection, tool, exc)
        text = await asyncio.to_thread(result_text, result, self.content.blobs.put)
        if result.is_error:
            return _failed(request, "error", await self._clipped(text))
        stored = await asyncio.to_thread(self.content.store_text, text)
        return ToolSucceeded(call_id=request.call_id, output=stored)

    async def _list_within(self, server: McpServerConfig) -> list[ToolSpec]:
        """`_list`, bounded so that every server is listed within one `list_tools` attempt."""
        try:
            async with asyncio.timeout(LISTING_SECONDS):
                return await self._list(server)
        except TimeoutError:
            problem = (
                f"MCP server {server.name} did not list its tools within {LISTING_SECONDS:g} s"
            )
            raise McpUnavailableError(server.name, problem) from None

    async def _list(self, server: McpServerConfig) -> list[ToolSpec]:
        tools = await self._tools_of(server)
        specs: dict[str, ToolSpec] = {}
        for tool in tools:
            spec = tool_spec(server, tool)
            if server.offers(tool.name) and spec.name not in specs:
                specs[spec.name] = spec
        self._names[server.name] = {n: s.origin.name for n, s in specs.items() if s.origin}
        return list(specs.values())

    async def _tools_of(self, server: McpServerConfig) -> list[McpTool]:
        """The server's tools; a session that broke while idle (the process exited between
        runs) is replaced once, so the server is not left out of a run for it."""
        for attempt in (1, 2):
            connection = await self.pool.connection(server.name)
            try:
                return await connection.list_tools()
            except Exception as exc:
                self.pool.retire(connection)
                if attempt == 2:
                    problem = f"could not list its tools: {describe(exc)}"
                    raise connection.unavailable(problem) from None
        raise AssertionError("unreachable")

    async def _tool_name(self, connection: McpConnection, name: str) -> str | None:
        """The server's name for Capstan's `name`, if the worker's config offers it."""
        server = connection.server
        if name not in self._names.get(server.name, {}):
            await self._list(server)
        tool = self._names.get(server.name, {}).get(name)
        return tool if tool is not None and server.offers(tool) else None

    async def _call_failed(
        self, request: RunToolInput, connection: McpConnection, tool: str, exc: Exception
    ) -> ToolFailed:
        server = connection.server
        where = f"MCP server {server.name}, tool {tool}"
        if isinstance(exc, McpOutputError):
            return _failed(request, "error", f"{where}: {exc}")
        if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
            if not await connection.responsive():
                self.pool.retire(connection)  # hung: the next call starts it afresh
            note = connection.noise_note()
            message = f"{where}: no answer within {call_timeout(server, tool):g} s{note}"
            return _failed(request, "timeout", scrub(message + "; cancelled", connection.secrets))
        if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
            failure: ToolFailure = "invalid_arguments" if exc.code == INVALID_PARAMS else "error"
            message = scrub(f"{where}: {exc.error.message}", connection.secrets)
            return _failed(request, failure, message)
        if isinstance(exc, ValidationError):
            return _failed(request, "error", f"{where}: the reply is not a valid MCP result")
        if isinstance(exc, _TRANSPORT_ERRORS) or isinstance(leaf(exc), _TRANSPORT_ERRORS):
            self.pool.retire(connection)
            message = f"{where}: the connection broke during the call ({describe(exc)})"
            raise McpBrokenError(server.name, scrub(message, connection.secrets)) from None
        raise exc

    def _unlisted(
        self,
        server: McpServerConfig,
        exc: BaseException,
        allowed: Sequence[str] | None,
        out: McpListing,
    ) -> None:
        if not isinstance(exc, McpError):
            raise exc
        needed = [a for a in allowed or () if server_of(a) == server.name]
        if needed:
            permanent = isinstance(exc, McpUnavailableError) and exc.permanent
            message = f"{exc}; the run's allowed_tools needs it ({', '.join(needed)})"
            raise McpRequiredError(message, permanent=permanent)
        log.warning("%s", exc)
        out.diagnostics.append(f"{exc}; its tools are not offered to this run")

    async def _clipped(self, text: str) -> str:
        if len(text) <= _ERROR_INLINE_CHARS:
            return text
        ref = await asyncio.to_thread(self.content.store_bytes, text.encode("utf-8"), text)
        return f"{text[:_ERROR_INLINE_CHARS]}… (full text: {READ_RESULT_TOOL} ref={ref.sha256})"


def _offer(server: McpServerConfig, spec: ToolSpec, out: McpListing) -> None:
    """Offer `spec`. A tool whose input schema cannot be used (an invalid or non-RE2 regex, a
    nested `$schema`, too large) is still offered, with a note: each call of it is refused
    with the reason, an observation the model reads, and the run goes on."""
    out.specs.append(spec)
    problem = schema_problem(spec.parameters)
    if problem is not None:
        tool = spec.origin.name if spec.origin else spec.name
        note = f"MCP server {server.name}, tool {tool}: its input schema cannot be used"
        out.diagnostics.append(f"{note} ({problem}); its calls are refused")
    rule = tool_rule(server, spec.origin.name if spec.origin else "")
    if rule is not None:
        out.rules[spec.name] = rule


def _wanted(server: str, allowed: Sequence[str] | None) -> bool:
    return allowed is None or any(server_of(a) == server for a in allowed)


def _allows(allowed: Sequence[str], name: str) -> bool:
    """Exact names, or a glob over one server's tools (`git__*`, `git__git_diff*`)."""
    return any(name == a or (SEPARATOR in a and fnmatchcase(name, a)) for a in allowed)


def _not_offered(
    allowed: Sequence[str] | None, specs: list[ToolSpec], config: McpConfig
) -> list[str]:
    names = {s.name for s in specs}
    return [
        f"allowed tool {a} is not offered by MCP server {server_of(a)}"
        for a in allowed or ()
        if server_of(a) in config.servers and "*" not in a and a not in names
    ]


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


def _failed(request: RunToolInput, failure: ToolFailure, error: str) -> ToolFailed:
    return ToolFailed(call_id=request.call_id, failure=failure, error=error)
