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

import difflib
from collections.abc import Mapping

from capstan.activities.tools.mcp.config import McpConfig, McpServerConfig
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.spec import SANDBOX_TOOLS, ToolRule

__all__ = ["OPEN_TO_EVERY_RUN", "offer_lines", "open_to_every_run", "unknown_rules"]

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
        said = _mcp_policy(name, server, policy)
        lines.append(f"tools {name}__*: MCP server {name} ({_how(server)}), {said}")
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


def unknown_rules(
    registry: ToolRegistry, policy: Mapping[str, ToolRule], mcp: McpConfig | None = None
) -> list[str]:
    """A warning for each rule of the policy file naming a tool the worker can never offer (a
    typo leaves the tool at its default policy). An MCP server's tools are known only when a
    run lists them, so a rule for `server__tool` of a configured server is taken as written."""
    known = [*registry.names(), *SANDBOX_TOOLS]  # the jail's tools, even when it is unavailable
    servers = mcp.servers if mcp is not None else {}
    lines = []
    for name in policy:
        if name in known or name.partition("__")[0] in servers:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f": did you mean {close[0]}?" if close else ""
        lines.append(f"CAPSTAN_POLICY has a rule for {name}, a tool this worker never offers{hint}")
    return lines


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


def _mcp_policy(name: str, server: McpServerConfig, policy: Mapping[str, ToolRule]) -> str:
    ruled = [f"{tool}: {o.decision}" for tool, o in server.tools.items() if o.decision]
    ruled += [
        f"{tool}: {rule.decision} (CAPSTAN_POLICY)"
        for tool, rule in policy.items()
        if tool.startswith(f"{name}__") and rule.decision
    ]
    denied = [f"{pattern}: not offered" for pattern in server.deny]
    said = "; ".join([*ruled, *denied])
    trusted = "read-only tools allow, others ask" if server.trust_annotations else "every tool asks"
    default = f"listed when a run starts; {trusted}"
    return f"{default} ({said})" if said else default
