"""MCP servers as tool sources, with the guarantees of builtin tools.

Listed once into the run's history, called through `run_tool` (idempotency key, heartbeats,
cancellation, retries), gated by policy from the servers' annotations and the operator's
configuration, fenced, budgeted and audited like every other tool. Built on the `mcp` SDK
directly (not `temporalio-mcp`): see `docs/mcp.md` for why. The SDK is imported only when a
worker has servers configured (`toolset`).
"""

from capstan.activities.tools.mcp.config import (
    McpConfig,
    McpServerConfig,
    load_mcp,
    load_mcp_config,
)
from capstan.activities.tools.mcp.errors import McpBrokenError, McpError, McpUnavailableError
from capstan.activities.tools.mcp.listing import McpListing, McpRequiredError
from capstan.activities.tools.mcp.naming import server_of, wire_name
from capstan.activities.tools.mcp.toolset import McpTools

__all__ = [
    "McpBrokenError",
    "McpConfig",
    "McpError",
    "McpListing",
    "McpRequiredError",
    "McpServerConfig",
    "McpTools",
    "McpUnavailableError",
    "load_mcp",
    "load_mcp_config",
    "server_of",
    "wire_name",
]
