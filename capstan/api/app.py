"""The ASGI application of `capstan serve`: REST, SSE streams and the inbox, on FastAPI.

FastAPI (on Starlette and uvicorn) because the API's shapes already are pydantic models
(`RunSpec`, `RunStatus`, `PendingView`, …): it validates bodies against them (a 422 names the
field) and writes the OpenAPI document from them, so the document cannot drift from the code.

Stateless: the app keeps a Temporal client, the tokens and a per-process write limit; runs, their
tenants and their events live in Temporal. Run as many as you like behind a load balancer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from capstan.api import a2a, agui, pages, routes, steer_routes, thread_routes
from capstan.api.auth import TokenStore, load_tokens
from capstan.api.backend import Backend, WriteLimiter
from capstan.api.document import operation_id, shape_document
from capstan.api.errors import BodyLimit, install_error_handlers
from capstan.api.headers import HeaderGuard
from capstan.api.mcp_http import McpEndpoint
from capstan.client.runs import CapstanClient
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings

__all__ = ["create_app"]


def create_app(
    settings: Settings,
    api: ApiSettings,
    *,
    tokens: TokenStore | None = None,
    client: CapstanClient | None = None,
) -> FastAPI:
    """The app; `tokens` default to `load_tokens(api)`, `client` connects on first use. Its
    lifespan runs the MCP endpoint's sessions (`/mcp`): serve it with the lifespan on."""
    tokens = tokens if tokens is not None else load_tokens(api)
    backend = Backend(settings, client)
    limiter = WriteLimiter(api.writes_per_minute)
    mcp = McpEndpoint(tokens, backend, limiter)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.running():
            yield

    app = FastAPI(
        lifespan=lifespan,
        title="Capstan",
        summary="Start, steer and follow durable agent runs; approve their tool calls.",
        version="1",
        openapi_url="/openapi.json",
        docs_url=None,  # the bundled docs pages fetch scripts from a CDN: not served
        redoc_url=None,
        generate_unique_id_function=operation_id,  # `start_run` -> `startRun`
    )
    app.state.api = api
    app.state.tokens = tokens
    app.state.backend = backend
    app.state.limiter = limiter
    install_error_handlers(app)
    app.include_router(routes.router)
    app.include_router(steer_routes.router)
    app.include_router(thread_routes.router)
    app.include_router(pages.router)
    agui.mount(app)  # AG-UI: POST /agui and /agui/{agent}
    a2a.mount(app)  # A2A: /a2a/{agent}/
    app.router.routes.append(mcp.route())  # MCP over streamable HTTP: /mcp
    app.add_middleware(BodyLimit, limit=api.max_body_bytes)
    app.add_middleware(HeaderGuard)  # outermost: headers are checked before a body is read
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with every error body as JSON: FastAPI files an operation's error
    responses under the operation's own media type (an event stream, an audit in Markdown),
    while errors are always sent as JSON."""
    if app.openapi_schema is None:
        doc = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        for operation in (op for path in doc["paths"].values() for op in path.values()):
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if status.isdigit() and int(status) >= 400 and "application/json" not in content:
                    schema: dict[str, Any] = next(
                        (c["schema"] for c in content.values() if "schema" in c), {}
                    )
                    response["content"] = {"application/json": {"schema": schema}}
        app.openapi_schema = shape_document(doc)
    return app.openapi_schema
