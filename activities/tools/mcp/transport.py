"""The MCP SDK transport for one configured server, with its secrets resolved at the last moment.

A stdio server gets the SDK's minimal environment (PATH, HOME, ...) plus exactly the variables
its config names, so the worker's keys do not leak into third-party processes. An HTTP server's
headers and URL are resolved from `${VAR}` templates here, inside the worker, when a connection
opens. `secrets_of` lists the resolved values so every message can be scrubbed of them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any, TextIO

import httpx2
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from capstan.activities.tools.mcp.config import McpServerConfig, resolve_template

__all__ = ["secrets_of", "transport_for"]

#: How long an HTTP response may stay silent beyond the call's own timeout (SSE streams idle).
_READ_SLACK_SECONDS = 30.0


def transport_for(server: McpServerConfig, env: Mapping[str, str]) -> Transport:
    if server.command is not None:
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env={name: env[name] for name in server.env if name in env},
            cwd=server.cwd,
        )
        return stdio_client(params, errlog=_errlog())
    return _http(server, env)


def secrets_of(server: McpServerConfig, env: Mapping[str, str]) -> tuple[str, ...]:
    """The values this server's connection reads from the worker's environment."""
    return tuple(env[name] for name in server.variables() if env.get(name))


@contextlib.asynccontextmanager
async def _http(server: McpServerConfig, env: Mapping[str, str]) -> AsyncIterator[Any]:
    assert server.url is not None
    headers = {key: resolve_template(value, env) for key, value in server.headers.items()}
    timeout = httpx2.Timeout(
        server.connect_timeout_seconds, read=server.timeout_seconds + _READ_SLACK_SECONDS
    )
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(resolve_template(server.url, env), http_client=http) as streams,
    ):
        yield streams


def _errlog() -> TextIO:
    """The server's stderr joins the worker's (its logs are the operator's, never the model's)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    return sys.stderr
