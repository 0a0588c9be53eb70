"""An MCP server's tool, as Capstan offers it: a `ToolSpec` with a risk profile and a policy rule.

Annotations are hints from the server, so they map onto Capstan's risk profile in one direction
only where it matters, and the operator has the last word (`[servers.X.tools.Y]` in the MCP
file, then the worker's policy file, then the run's own rule):

- `readOnlyHint` (default false): true makes the tool `read_only` (allowed by default, no state
  change for the Rule of Two); false means it changes state, so a human is asked. Ignored when
  the server has `trust_annotations = false`.
- `destructiveHint` (default true): recorded; a destructive tool is never read-only, whatever
  `readOnlyHint` says, so it is always asked for.
- `idempotentHint` (default false): recorded; every call carries the idempotency key anyway.
- `openWorldHint` (default true): true keeps `untrusted_output` even on a server the operator
  trusts (`untrusted_output = false`).

Every MCP tool's output is fenced unless the operator says the server is trusted and the tool
does not reach the open world. `sensitive` comes only from the operator: no hint declares it.
Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from capstan.activities.tools.mcp.config import McpServerConfig
from capstan.activities.tools.mcp.naming import wire_name
from capstan.core.spec import ToolRule
from capstan.core.tooling import ToolOrigin, ToolSpec

__all__ = ["ACTIVITY_MARGIN_SECONDS", "call_timeout", "tool_rule", "tool_spec"]

#: The run_tool activity's start-to-close is the call's timeout plus a connect and this margin,
#: so the call's own timeout (a clear observation) fires before Temporal's.
ACTIVITY_MARGIN_SECONDS = 5.0


def tool_spec(server: McpServerConfig, tool: McpTool) -> ToolSpec:
    """The spec the model and the gate see for the server's `tool`."""
    risk = _Risk.of(server, tool)
    hints = tool.annotations
    annotations = hints.model_dump(by_alias=True, exclude_none=True) if hints else {}
    annotations["destructiveHint"] = risk.destructive  # absent means true: say it
    return ToolSpec(
        name=wire_name(server.name, tool.name),
        description=_description(server.name, tool),
        parameters=_schema(tool.input_schema),
        read_only=risk.read_only,
        timeout_seconds=(
            call_timeout(server, tool.name)
            + server.connect_timeout_seconds
            + ACTIVITY_MARGIN_SECONDS
        ),
        untrusted_output=risk.untrusted_output,
        sensitive=risk.sensitive,
        origin=ToolOrigin(server=server.name, name=tool.name, annotations=annotations),
    )


@dataclass(frozen=True)
class _Risk:
    read_only: bool
    destructive: bool
    untrusted_output: bool
    sensitive: bool

    @classmethod
    def of(cls, server: McpServerConfig, tool: McpTool) -> _Risk:
        hints = tool.annotations or ToolAnnotations()
        # absent destructiveHint means true; read-only and destructive at once: the riskier
        destructive = hints.destructive_hint is not False and not (
            hints.read_only_hint and hints.destructive_hint is None
        )
        read_only = bool(hints.read_only_hint) and not destructive and server.trust_annotations
        open_world = hints.open_world_hint is not False
        risk = cls(read_only, destructive, server.untrusted_output or open_world, server.sensitive)
        override = server.tools.get(tool.name)
        if override is None:
            return risk
        return cls(
            read_only=_pick(override.read_only, risk.read_only),
            destructive=destructive,
            untrusted_output=_pick(override.untrusted_output, risk.untrusted_output),
            sensitive=_pick(override.sensitive, risk.sensitive),
        )


def _pick(override: bool | None, derived: bool) -> bool:
    return derived if override is None else override


def tool_rule(server: McpServerConfig, tool: str) -> ToolRule | None:
    """The MCP file's policy for the server's `tool` (the worker's policy file wins over it)."""
    override = server.tools.get(tool)
    if override is None or (override.decision is None and not override.deny_arguments):
        return None
    return ToolRule(decision=override.decision, deny_arguments=override.deny_arguments)


def call_timeout(server: McpServerConfig, tool: str) -> float:
    override = server.tools.get(tool)
    return (override.timeout_seconds if override else None) or server.timeout_seconds


def _description(server: str, tool: McpTool) -> str:
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    text = (tool.description or "").strip() or (title or tool.name)
    return f"{text}\n\n(MCP server {server}, tool {tool.name})"


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema as the model and the gate read it (a root object is required)."""
    cleaned = {k: v for k, v in schema.items() if k not in ("$schema", "title")}
    cleaned.setdefault("type", "object")
    cleaned.setdefault("properties", {})
    return cleaned
