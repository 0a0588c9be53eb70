"""`capstan serve`: the HTTP API, live streams, the approval inbox and the protocol front doors
(MCP, AG-UI, A2A).

A Temporal client like the CLI: it imports the client, history reading, the core and the
runtime edges, never the workflow, activities or worker (import-linter checks it). Nothing is
imported here: `capstan mcp` over stdio loads its own modules, not the whole app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capstan.api.app import create_app
    from capstan.runtime.api_settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from capstan.api.app import create_app

        return create_app
    if name == "ApiSettings":
        from capstan.runtime.api_settings import ApiSettings

        return ApiSettings
    raise AttributeError(f"module 'capstan.api' has no attribute {name!r}")
