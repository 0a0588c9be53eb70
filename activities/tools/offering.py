"""What a worker offers, said once when it starts: each tool, where it comes from, its policy.

`capstan worker` logs one line a tool (`tool write_file: builtin, ask (default: changes
state)`), one line an MCP server, and a warning when the tools that run code or write files are
offered to every run that does not narrow its tools with `allowed_tools`. The policy shown is
the worker's: its policy file (`CAPSTAN_POLICY`), else the MCP file's rule, else the default
(read-only: allow; anything that changes state: ask); a run may only narrow it.

Never starts, dials or lists anything: an MCP server's tools are listed when a run starts, so a
server is described by its configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

from capstan.activities.tools.mcp.config import McpConfig, McpServerConfig
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.spec import ToolRule

__all__ = ["OPEN_TO_EVERY_RUN", "offer_lines", "open_to_every_run"]

#: The tools that run code or write the workspace: worth a word when every run gets them.
OPEN_TO_EVERY_RUN = ("run_shell", "run_python", "write_file")


def offer_lines(
    registry: ToolRegistry, policy: Mapping[str, ToolRule], mcp: McpConfig | None = None
) -> list[str]:
    """One line per tool of `registry` and per server of `mcp`: source and policy."""
    lines = []
    for name in registry.names():
        source = registry.source(name)
        lines.append(f"tool {name}: {source}, {_policy(name, registry, policy)}")
    for name, server in (mcp.servers if mcp is not None else {}).items():
        lines.append(f"tools {name}__*: MCP server {name} ({_how(server)}), {_mcp_policy(server)}")
    return lines


def open_to_every_run(registry: ToolRegistry, policy: Mapping[str, ToolRule]) -> str | None:
    """The warning for shell, Python and file-writing tools offered to any run, or None when the
    policy file denies them all."""
    offered = [
        name
        for name in OPEN_TO_EVERY_RUN
        if registry.get(name) is not None and _decision(name, registry, policy) != "deny"
    ]
    if not offered:
        return None
    return (
        f"{', '.join(offered)} are offered to every run that sets no allowed_tools (each call "
        "asks for approval unless CAPSTAN_POLICY says otherwise): give runs and agents an "
        "allowed_tools list, or deny these tools in CAPSTAN_POLICY"
    )


def _decision(name: str, registry: ToolRegistry, policy: Mapping[str, ToolRule]) -> str:
    rule = policy.get(name)
    if rule is not None and rule.decision is not None:
        return rule.decision
    found = registry.get(name)
    return "allow" if found is not None and found.read_only else "ask"


def _policy(name: str, registry: ToolRegistry, policy: Mapping[str, ToolRule]) -> str:
    found = registry.get(name)
    if found is None:
        return "run by the loop itself"
    rule = policy.get(name)
    if rule is not None and rule.decision is not None:
        return f"{rule.decision} (CAPSTAN_POLICY)"
    return "allow (default: read-only)" if found.read_only else "ask (default: changes state)"


def _how(server: McpServerConfig) -> str:
    return f"stdio: {server.command}" if server.transport == "stdio" else "streamable HTTP"


def _mcp_policy(server: McpServerConfig) -> str:
    ruled = [f"{tool}: {o.decision}" for tool, o in server.tools.items() if o.decision]
    denied = [f"{pattern}: not offered" for pattern in server.deny]
    said = "; ".join([*ruled, *denied])
    default = "listed when a run starts; read-only tools allow, others ask"
    return f"{default} ({said})" if said else default
