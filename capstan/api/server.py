"""Running the app: `capstan serve` on uvicorn, in the CLI's event loop."""

from __future__ import annotations

import uvicorn

from capstan.api.app import create_app
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings

__all__ = ["serve"]


async def serve(settings: Settings, api: ApiSettings) -> None:
    """Serve until SIGINT or SIGTERM. Tokens are loaded first: a bad tokens file is one
    `ConfigError` line before anything listens."""
    app = create_app(settings, api)
    config = uvicorn.Config(
        app,
        host=api.host,
        port=api.port,
        lifespan="on",  # runs the MCP sessions (`/mcp`)
        log_level="info",
        server_header=False,
        timeout_graceful_shutdown=5,  # open event streams end here; clients resume by id
    )
    server = uvicorn.Server(config)
    shown = "127.0.0.1" if api.host in ("0.0.0.0", "::") else api.host
    print(
        f"capstan serve: inbox http://{shown}:{api.port}/  API /api  OpenAPI /openapi.json  "
        f"MCP /mcp (Temporal {settings.address}, {len(app.state.tokens)} tokens)",
        flush=True,
    )
    await server.serve()
