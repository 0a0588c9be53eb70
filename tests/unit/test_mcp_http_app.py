"""`capstan mcp --http` alone (`mcp_app`): the same guards as `capstan serve` before the MCP
SDK reads anything: a token, bounded headers and a bounded body."""

from __future__ import annotations

import httpx

from capstan.api.auth import Principal, Scope, TokenStore, digest
from capstan.api.mcp_http import mcp_app
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings

TOKEN = "mcp-app-token-0123456789"
TOKENS = TokenStore(
    {digest(TOKEN): Principal(identity="a@x", tenant="x", scopes=frozenset({Scope.ADMIN}))}
)


async def test_bodies_headers_and_tokens_are_checked_first() -> None:
    app = mcp_app(Settings(), ApiSettings(max_body_bytes=1024), tokens=TOKENS)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=transport, base_url="http://mcp") as http:
        big = await http.post("/mcp", content=b" " * 4096, headers=headers)
        long_header = await http.post(
            "/mcp", content=b"{}", headers={**headers, "mcp-session-id": "s" * 500}
        )
        anonymous = await http.post("/mcp", content=b"{}")
    assert big.status_code == 413 and big.json()["error"]["code"] == "too_large"
    assert long_header.status_code == 422
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "invalid_token"
