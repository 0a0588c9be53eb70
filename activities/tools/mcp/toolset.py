"""`McpTools`: the worker's MCP servers as a tool source of `list_tools` and `run_tool`.

This module is what the worker and `tool_runner` import, with or without MCP servers
configured, so it must never import the MCP SDK at module level: the SDK and its transports
cost ~0.6 s of imports (and their memory) that a worker with no servers would pay at every
start. They are loaded when `McpTools` is built, which the worker does only when
`CAPSTAN_MCP` names at least one server. The behaviour (listing, calls, the error taxonomy)
lives in `servers.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from capstan.activities.tools.mcp.config import McpConfig
from capstan.activities.tools.mcp.listing import McpListing, McpRequiredError
from capstan.activities.tools.mcp.naming import server_of
from capstan.core.activity_io import RunToolInput
from capstan.core.tooling import ToolFailed, ToolSucceeded
from capstan.runtime.blobstore import ContentStore

if TYPE_CHECKING:
    from temporalio.plugin import SimplePlugin

    from capstan.activities.tools.mcp.connection import McpPool

__all__ = ["McpListing", "McpRequiredError", "McpTools"]


class McpTools:
    """Every configured MCP server, behind one pool of sessions per worker."""

    def __init__(self, config: McpConfig, env: Mapping[str, str], content: ContentStore) -> None:
        from capstan.activities.tools.mcp.servers import McpServers  # the SDK, only when used

        self.config = config
        self.content = content
        self._servers = McpServers(config, env, content)

    @property
    def pool(self) -> McpPool:
        return self._servers.pool

    def owns(self, name: str) -> bool:
        return server_of(name) in self.config.servers

    def plugin(self) -> SimplePlugin:
        """Ties the servers' lifetime to the worker's: every session is closed (every stdio
        server stopped) when the worker stops."""
        return self._servers.plugin()

    async def listing(self, allowed: Sequence[str] | None) -> McpListing:
        """The tools of every server `allowed` may use (all, when None)."""
        return await self._servers.listing(allowed)

    async def call(self, request: RunToolInput) -> ToolSucceeded | ToolFailed:
        """Run one call of an MCP tool; see `servers` for what can come back."""
        return await self._servers.call(request)
