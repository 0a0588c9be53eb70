"""MCP over streamable HTTP at `/mcp` of `capstan serve`: the run tools with the API's tokens.

Each request carries a bearer token of the server's tokens file. The MCP SDK's own
authentication pieces check it (`BearerAuthBackend`, `RequireAuthMiddleware`): a request with
no valid token gets the MCP authorization spec's 401 (`WWW-Authenticate: Bearer`,
`{"error": "invalid_token"}`), and a session answers only the token that opened it (the SDK
binds each session to the principal of its `AccessToken`; another token is told the session
does not exist). Tools then act as the REST routes do for that token
(`capstan.api.mcp_access.TenantAccess`): its tenant's runs only, its scopes, its write limit.

Sessions are stateful (`mcp-session-id`), so a client on MCP 2025-11-25 can be asked through
elicitation mid-call (`review`), and streamed (SSE) answers reach it; a client on 2026-07-28
uses the stateless round trips. The session manager runs inside the app's lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp

from capstan.api.auth import TokenStore, digest, load_tokens
from capstan.api.backend import Backend, WriteLimiter
from capstan.api.errors import BodyLimit
from capstan.api.headers import HeaderGuard
from capstan.api.mcp_access import RunAccess, TenantAccess
from capstan.api.mcp_server import build_server
from capstan.api.tenancy import Tenancy
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings

__all__ = ["MCP_PATH", "McpEndpoint", "mcp_app"]

MCP_PATH = "/mcp"


class _Tokens:
    """The API's tokens as the MCP SDK's `TokenVerifier`: the principal of an access token is
    the token's digest (never the token) with the identity as its subject."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self.store.find(token)
        if principal is None:
            return None
        return AccessToken(
            token=token,
            client_id=digest(token),
            scopes=sorted(s.value for s in principal.scopes),
            subject=principal.identity,
            claims={"tenant": principal.tenant},
        )


class McpEndpoint:
    """The `/mcp` route of an app and the session manager its lifespan runs."""

    def __init__(self, tokens: TokenStore, backend: Backend, limiter: WriteLimiter) -> None:
        self.tokens = tokens
        self.backend = backend
        self.limiter = limiter
        server = build_server(self.access)
        # a bearer token (never a cookie) authenticates every request, so a page a DNS rebinding
        # points here cannot act; the SDK's Host check would refuse a server behind any name
        server.streamable_http_app(
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        self.sessions: StreamableHTTPSessionManager = server.session_manager

    def route(self) -> Route:
        transport: ASGIApp = StreamableHTTPASGIApp(self.sessions)
        guarded: ASGIApp = RequireAuthMiddleware(transport, required_scopes=[])
        app = AuthenticationMiddleware(
            AuthContextMiddleware(guarded), backend=BearerAuthBackend(_Tokens(self.tokens))
        )
        return Route(MCP_PATH, endpoint=app, methods=["GET", "POST", "DELETE"])

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.sessions.run():
            yield

    async def access(self, ctx: Context[Any, Any]) -> RunAccess:
        """The calling token's runs, from the HTTP request the call came in."""
        request = ctx.request_context.request
        user = request.scope.get("user") if isinstance(request, Request) else None
        principal = (
            self.tokens.find(user.access_token.token)
            if isinstance(user, AuthenticatedUser)
            else None
        )
        if principal is None:  # RequireAuthMiddleware lets no such request through
            raise PermissionError("no bearer token")
        runs = Tenancy(await self.backend.client(), self.backend.tenant_index)
        return TenantAccess(runs, principal, self.limiter)


def mcp_app(settings: Settings, api: ApiSettings, *, tokens: TokenStore | None = None) -> Starlette:
    """`capstan mcp --http`: only `/mcp`, with the API's tokens, tenants and write limit (for
    a host that wants MCP without the REST API and the inbox). Tokens load here: a bad tokens
    file is one `ConfigError` line before anything listens."""
    tokens = tokens if tokens is not None else load_tokens(api)
    endpoint = McpEndpoint(tokens, Backend(settings), WriteLimiter(api.writes_per_minute))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with endpoint.running():
            yield

    guards = [Middleware(BodyLimit, limit=api.max_body_bytes), Middleware(HeaderGuard)]
    return Starlette(routes=[endpoint.route()], middleware=guards, lifespan=lifespan)
