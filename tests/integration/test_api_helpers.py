"""Shared set-up for the `capstan serve` tests (no tests here): tokens for two tenants, the app
over a test's client, an httpx client on it (in-process, or a real socket through uvicorn)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from capstan.api.app import create_app
from capstan.api.auth import Principal, Scope, TokenStore, digest
from capstan.client.runs import CapstanClient
from capstan.core.spec import INTERNAL_FIELDS, RunSpec
from capstan.host.health import quiet_server
from capstan.runtime.api_settings import ApiSettings
from tests.conftest import free_port

__all__ = [
    "ALICE",
    "MALLORY",
    "READER",
    "ROOT",
    "SseEvent",
    "api_client",
    "app_for",
    "auth",
    "read_sse",
    "served",
]

#: acme: alice reads, steers and approves; reader only reads; root is acme's admin
ALICE = "alice-token-0123456789"
READER = "reader-token-0123456789"
ROOT = "root-token-0123456789abc"
#: another tenant, with every scope: must never see or touch acme's runs
MALLORY = "mallory-token-0123456789"

TOKENS = TokenStore(
    {
        digest(ALICE): Principal(
            identity="alice@acme",
            tenant="acme",
            scopes=frozenset({Scope.READ, Scope.STEER, Scope.APPROVE}),
        ),
        digest(READER): Principal(
            identity="reader@acme", tenant="acme", scopes=frozenset({Scope.READ})
        ),
        digest(ROOT): Principal(
            identity="root@acme", tenant="acme", scopes=frozenset({Scope.ADMIN})
        ),
        digest(MALLORY): Principal(
            identity="mallory@other", tenant="other", scopes=frozenset({Scope.ADMIN})
        ),
    }
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body_of(spec: RunSpec) -> dict[str, Any]:
    """A spec as a `POST /api/runs` body: what a caller may write (no internal fields)."""
    return spec.model_dump(mode="json", exclude_none=True, exclude=set(INTERNAL_FIELDS))


def app_for(client: CapstanClient, **api: Any) -> FastAPI:
    api.setdefault("stream_poll_seconds", 2.0)
    api.setdefault("live_text_seconds", 0.2)
    return create_app(client.settings, ApiSettings(**api), tokens=TOKENS, client=client)


@contextlib.asynccontextmanager
async def api_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app in-process (no socket)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        yield http


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """The app on a real socket (uvicorn, in this event loop); yields its base URL. The app's
    lifespan (the MCP sessions) runs here: uvicorn skips its shutdown on a forced exit."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = quiet_server(config)  # in this event loop: the test runner keeps its signals
    async with app.router.lifespan_context(app):
        async with _serving(server) as base:
            yield base


@contextlib.asynccontextmanager
async def _serving(server: uvicorn.Server) -> AsyncIterator[str]:
    port = server.config.port
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 30)


@dataclass
class SseEvent:
    event: str
    data: Any
    id: str | None


async def read_sse(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Parse an SSE body as a browser does (comments skipped, one event per blank line)."""
    event, data, event_id = "message", [], None
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SseEvent(event, json.loads("\n".join(data)), event_id)
            event, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value
