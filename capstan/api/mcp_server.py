"""`capstan mcp`: durable runs as MCP tools, for any model client that speaks MCP (stdio).

A model client (Claude Desktop, an IDE, another agent) starts a run, follows it, and decides
its approvals and questions as tool calls; a run's audit is a resource. The runs are ordinary
Capstan runs: they survive the client going away, and a person may decide them from the CLI or
the inbox as well. Over stdio the server is its user's own process, so it acts as the operator
(as the CLI does); tenants and tokens are the HTTP API's (`capstan serve`).

Every failure a caller can cause (an unknown run, no such request, an input the run refuses) is
an MCP tool error whose text is one line, never a traceback.

    capstan mcp        # then, in the client's config: {"command": "capstan", "args": ["mcp"]}
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from capstan.audit.history import load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail
from capstan.audit.tree import tree_entries
from capstan.client.agents import resolve_agent
from capstan.client.runs import CapstanClient
from capstan.core.errors import CapstanError
from capstan.core.spec import RunSpec

__all__ = ["INSTRUCTIONS", "RunTools", "build_server"]

INSTRUCTIONS = (
    "Durable agent runs on Capstan. start_run returns a run id at once; the run goes on whether "
    "or not you stay. Poll run_status or wait in run_result; when a run waits for approval or "
    "an answer, pending lists the requests and approve, deny and answer decide them."
)


def _failed(exc: Exception) -> ToolError:
    return ToolError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


class RunTools:
    """The tools and the resource, over one client."""

    def __init__(self, client: CapstanClient) -> None:
        self.client = client

    async def start_run(
        self,
        task: str,
        agent: str | None = None,
        model: str | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Start a durable agent run on `task` (with an agent definition of the server's, or a
        model profile) and return its id at once."""
        fields = {k: v for k, v in (("model", model), ("max_steps", max_steps)) if v is not None}
        try:
            if agent is not None:
                agents = self.client.settings.agents_file
                if agents is None:
                    raise ToolError("this server has no agent definitions (CAPSTAN_AGENTS)")
                spec = resolve_agent(agents, agent, task, **fields)
            else:
                spec = RunSpec(task=task, **fields)
            return {"run_id": await self.client.start_run(spec)}
        except (CapstanError, ValueError) as exc:
            raise _failed(exc) from None

    async def run_status(self, run_id: str) -> dict[str, Any]:
        """Phase, step, what the run waits for, and its output once it has ended."""
        try:
            status = await self.client.status(run_id)
        except CapstanError as exc:
            raise _failed(exc) from None
        view: dict[str, Any] = self.client.status_view(status).model_dump(mode="json")
        return view

    async def run_result(self, run_id: str, wait_seconds: float = 0.0) -> dict[str, Any]:
        """The run's result once it has ended (waiting up to `wait_seconds`, at most 300);
        `{"ended": false, ...its status}` while it goes on."""
        try:
            async with asyncio.timeout(max(0.001, min(wait_seconds, 300.0))):
                result = await self.client.result(run_id)
        except TimeoutError:
            return {"ended": False, **await self.run_status(run_id)}
        except CapstanError as exc:
            raise _failed(exc) from None
        shown: dict[str, Any] = result.model_dump(mode="json", exclude={"tail", "conversation"})
        shown["output"] = self.client.output_data(result)
        return {"ended": True, **shown}

    async def pending(self, run_id: str) -> dict[str, Any]:
        """The run's open approval requests and questions."""
        try:
            view = await self.client.pending(run_id)
        except CapstanError as exc:
            raise _failed(exc) from None
        shown: dict[str, Any] = view.model_dump(mode="json")
        return shown

    async def approve(self, run_id: str, request_id: str | None = None, reason: str = "") -> str:
        """Approve a tool call the run waits on (the only open one when `request_id` is not
        given)."""
        return await self._steered(
            self.client.decide(run_id, "approve", request_id, reason=reason), "approved"
        )

    async def deny(self, run_id: str, reason: str, request_id: str | None = None) -> str:
        """Deny a tool call; `reason` is what the run's model is told."""
        return await self._steered(
            self.client.decide(run_id, "deny", request_id, reason=reason), "denied"
        )

    async def answer(self, run_id: str, request_id: str, text: str) -> str:
        """Answer a question the run's agent asked (`ask_user`)."""
        return await self._steered(self.client.answer(run_id, request_id, text), "answered")

    async def send_message(self, run_id: str, text: str) -> str:
        """A message the run's model reads at its next step, in order."""
        return await self._steered(self.client.send_message(run_id, text), "sent")

    async def audit(self, run_id: str) -> str:
        """Everything the run saw and did, as a verified trail (Markdown)."""
        histories = await load_histories(self.client.client, run_id)
        if not histories:
            raise ResourceError(f"no run {run_id!r}")
        entries = await tree_entries(self.client.client, histories)
        records, issues = build_trail(entries, self.client.content())
        return render_trail(records, issues, "md")

    @staticmethod
    async def _steered(call: Awaitable[Any], done: str) -> str:
        try:
            await call
        except CapstanError as exc:
            raise _failed(exc) from None
        return done


def build_server(client: CapstanClient) -> MCPServer:
    """The MCP server over `client` (its Temporal connection and settings)."""
    server: MCPServer = MCPServer(name="capstan", instructions=INSTRUCTIONS)
    tools = RunTools(client)
    for tool in (
        tools.start_run,
        tools.run_status,
        tools.run_result,
        tools.pending,
        tools.approve,
        tools.deny,
        tools.answer,
        tools.send_message,
    ):
        server.add_tool(tool)
    server.resource("capstan://runs/{run_id}/audit", name="audit", mime_type="text/markdown")(
        tools.audit
    )
    return server
