"""Running the apps on uvicorn, in the CLI's event loop: `capstan serve` (everything) and
`capstan mcp --http` (only `/mcp`)."""

from __future__ import annotations

from starlette.types import ASGIApp

from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings

__all__ = ["serve", "serve_mcp"]


async def serve(settings: Settings, api: ApiSettings) -> None:
    """`capstan serve` until SIGINT or SIGTERM. Tokens are loaded first: a bad tokens file is
    one `ConfigError` line before anything listens."""
    from capstan.api.app import create_app

    app = create_app(settings, api)
    shown = _shown(api)
    await _run(
        app,
        api,
        f"capstan serve: inbox http://{shown}:{api.port}/  API /api  OpenAPI /openapi.json  "
        f"MCP /mcp (Temporal {settings.address}, {len(app.state.tokens)} tokens)",
    )


async def serve_mcp(settings: Settings, api: ApiSettings) -> None:
    """`capstan mcp --http` until SIGINT or SIGTERM: MCP over streamable HTTP at `/mcp`."""
    from capstan.api.auth import load_tokens
    from capstan.api.mcp_http import MCP_PATH, mcp_app

    tokens = load_tokens(api)
    app = mcp_app(settings, api, tokens=tokens)
    await _run(
        app,
        api,
        f"capstan mcp: streamable HTTP at http://{_shown(api)}:{api.port}{MCP_PATH} "
        f"(Temporal {settings.address}, {len(tokens)} tokens)",
    )


def _shown(api: ApiSettings) -> str:
    return "127.0.0.1" if api.host in ("0.0.0.0", "::") else api.host


async def _run(app: ASGIApp, api: ApiSettings, banner: str) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        host=api.host,
        port=api.port,
        lifespan="on",  # runs the MCP sessions (`/mcp`)
        log_level="info",
        server_header=False,
        timeout_graceful_shutdown=5,  # open event streams end here; clients resume by id
    )
    print(banner, flush=True)
    await uvicorn.Server(config).serve()
