"""What the MCP servers offer one run (`McpListing`), and the failure that ends a run whose
`allowed_tools` needs a server that cannot be listed. No MCP SDK here: `tool_runner` and the
worker import these whether or not any server is configured."""

from __future__ import annotations

from dataclasses import dataclass, field

from capstan.core.spec import ToolRule
from capstan.core.tooling import ToolSpec

__all__ = ["McpListing", "McpRequiredError"]


class McpRequiredError(Exception):
    """A server the run's `allowed_tools` needs could not be listed."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass
class McpListing:
    """What the MCP servers offer one run, and what the listing could not reach."""

    specs: list[ToolSpec] = field(default_factory=list)
    rules: dict[str, ToolRule] = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)
