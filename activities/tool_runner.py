"""The `list_tools` and `run_tool` activities.

`run_tool` never fails for a tool's own reasons: an unknown tool, arguments that fail the schema
and exceptions raised by the tool all come back as `ToolFailed`, which the model sees. Only
infrastructure trouble (a killed worker, a timeout, an MCP server whose connection broke) is
left to Temporal's retries.

Tools come from the registry (builtins and the user's) and from MCP servers (`McpTools`); both
end up in one catalog, and a call is routed by name (`<server>__<tool>` is an MCP tool).

A call works in its run's workspace: the worker's root, or the directory its workspace key
names below it (`capstan.activities.tools.workspaces`: a tenant's, a thread's), never another.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.tools.builtins import delegate_spec
from capstan.activities.tools.mcp import McpBrokenError, McpListing, McpRequiredError, McpTools
from capstan.activities.tools.registry import ToolContext, ToolRegistry
from capstan.activities.tools.workspace import WorkspaceError
from capstan.activities.tools.workspaces import jail_owner, run_workspace
from capstan.core import output, policy
from capstan.core.activity_io import CheckFinishInput, FinishVerdict, ListToolsInput, RunToolInput
from capstan.core.activity_names import ActivityName
from capstan.core.content import Text
from capstan.core.notifications import NotifyKind
from capstan.core.privilege import clamp_sandbox
from capstan.core.spec import SANDBOX_TOOLS, SandboxLimits, ToolRule
from capstan.core.tooling import (
    FINISH_TOOL,
    ToolCatalog,
    ToolFailed,
    ToolInfo,
    ToolOutcome,
    ToolSpec,
    ToolSucceeded,
)
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.telemetry import Instruments

__all__ = ["FinishGuard", "ToolActivities"]

#: `async def guard(answer, run_id, step) -> str | None`: a reason refuses the first finish.
FinishGuard = Callable[[str, str, int], Awaitable[str | None]]


class ToolActivities:
    def __init__(
        self,
        registry: ToolRegistry,
        content: ContentStore,
        workspace: Path,
        policy: Mapping[str, ToolRule] | None = None,
        *,
        telemetry: Instruments | None = None,
        finish_guard: FinishGuard | None = None,
        mcp: McpTools | None = None,
        notify: tuple[NotifyKind, ...] = (),
        sandbox_ceiling: SandboxLimits | None = None,
        workspace_owner: tuple[int, int] | None = None,
    ) -> None:
        self.telemetry = telemetry or Instruments()
        #: the most a sandbox call may have, whatever its run asks (CAPSTAN_SANDBOX_LIMITS)
        self.sandbox_ceiling = sandbox_ceiling or SandboxLimits()
        self.notify = notify  # what the worker's webhooks want (`ToolCatalog.notify`)
        self.mcp = mcp
        self.finish_guard = finish_guard
        self.registry = registry
        self.content = content
        self.workspace = workspace
        self.policy = dict(policy or {})
        #: who owns a tenant's (thread's) workspace: the jail's uid on a root worker
        self.workspace_owner = workspace_owner or jail_owner(os.environ)
        workspace.mkdir(parents=True, exist_ok=True)

    @activity.defn(name=ActivityName.LIST_TOOLS.value)
    async def list_tools(self, request: ListToolsInput) -> ToolCatalog:
        specs = self.registry.specs(request.allowed)
        if request.output_schema is not None:  # a typed run: `finish` takes its answer's shape
            typed = {
                "parameters": output.finish_parameters(request.output_schema),
                "strict": output.strict_subset(output.finish_parameters(request.output_schema)),
            }
            specs = [s.model_copy(update=typed) if s.name == FINISH_TOOL else s for s in specs]
        listing = await self._mcp_listing(request.allowed)
        specs += listing.specs
        if request.delegates:  # the loop and the workflow handle it (a child run)
            specs.append(delegate_spec(request.delegates, request.delegate_outputs))
        data = json.dumps([s.model_dump(mode="json") for s in specs], sort_keys=True)
        ref = await asyncio.to_thread(self.content.store_bytes, data.encode("utf-8"))
        timeouts = {s.name: s.timeout_seconds for s in specs if s.timeout_seconds}
        infos = {s.name: self._info(s, listing.rules.get(s.name)) for s in specs}
        return ToolCatalog(
            names=tuple(s.name for s in specs),
            timeouts=timeouts,
            specs_ref=ref,
            tools=infos,
            finish_hook=self.finish_guard is not None,
            diagnostics=tuple(listing.diagnostics),
            notify=self.notify,
        )

    async def _mcp_listing(self, allowed: tuple[str, ...] | None) -> McpListing:
        """The MCP servers' tools for this run; a server the run needs but cannot have fails
        the listing (for good when a retry cannot help), and so the run, with the reason."""
        if self.mcp is None:
            return McpListing()
        try:
            return await self.mcp.listing(allowed)
        except McpRequiredError as exc:
            raise ApplicationError(
                str(exc), type="McpServerRequired", non_retryable=exc.permanent
            ) from None

    @activity.defn(name=ActivityName.CHECK_FINISH.value)
    async def check_finish(self, request: CheckFinishInput) -> FinishVerdict:
        """Check a run's answer: against its output schema (a typed run), then with the
        worker's finish guard (`CAPSTAN_FINISH_GUARD`) when it has one."""
        answer = await asyncio.to_thread(self.content.resolve, request.answer)
        stored: Text | None = None
        if request.output_schema is not None:
            # bounded work (capstan.core.output), still off the event loop: heartbeats go on
            checked = await asyncio.to_thread(output.check_answer, request.output_schema, answer)
            if checked.answer is not None:
                stored = await asyncio.to_thread(self.content.store_text, checked.answer)
            if checked.errors:
                return FinishVerdict(output=stored, invalid=checked.errors)
            answer = checked.answer or ""
        if self.finish_guard is None or not request.hook:
            return FinishVerdict(output=stored)
        refusal = await self.finish_guard(answer, request.run_id, request.step)
        return FinishVerdict(refusal=refusal or None, output=stored)

    def _info(self, spec: ToolSpec, source_rule: ToolRule | None = None) -> ToolInfo:
        """The gate's view of `spec`; the worker's policy file wins over the tool source's rule
        (an MCP server's `[servers.X.tools.Y]`)."""
        rule = self.policy.get(spec.name, ToolRule())
        base = source_rule or ToolRule()
        return ToolInfo(
            read_only=spec.read_only,
            untrusted_output=spec.untrusted_output,
            sensitive=spec.sensitive,
            parameters=spec.parameters,
            policy=rule.decision or base.decision,
            deny_arguments={**base.deny_arguments, **rule.deny_arguments},
        )

    @activity.defn(name=ActivityName.RUN_TOOL.value)
    async def run_tool(self, request: RunToolInput) -> ToolOutcome:
        started = time.monotonic()
        with self.telemetry.tracer.start_as_current_span(
            f"execute_tool {request.name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": request.name,
                "gen_ai.tool.call.id": request.call_id,
                "capstan.run_id": request.run_id,
                "capstan.step": request.step,
                "capstan.idempotency_key": request.idempotency_key,
            },
        ) as span:
            outcome = await self._run(request)
            span.set_attribute("capstan.tool.outcome", outcome.kind)
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        self.telemetry.tool_latency.record(
            outcome.duration_ms, {"tool": request.name, "outcome": outcome.kind}
        )
        return outcome

    def _limits(self, request: RunToolInput) -> SandboxLimits | None:
        """The jail limits of a sandbox call: what its run asks, within the worker's ceiling."""
        if request.sandbox is None and request.name not in SANDBOX_TOOLS:
            return None
        return clamp_sandbox(request.sandbox or SandboxLimits(), self.sandbox_ceiling)

    async def _run(self, request: RunToolInput) -> ToolSucceeded | ToolFailed:
        if request.deny_patterns:  # arguments the gate could not read: checked here
            text = await asyncio.to_thread(self.content.resolve, request.arguments)
            problem = policy.denied_by(request.name, request.deny_patterns, text)
            if problem is not None:
                return ToolFailed(call_id=request.call_id, failure="denied", error=problem)
        if self.mcp is not None and self.mcp.owns(request.name):
            try:
                return await self.mcp.call(request)
            except McpBrokenError as exc:  # retried by Temporal on a fresh connection
                raise ApplicationError(str(exc), type="McpServerBroken") from None
        call_id = request.call_id
        found = self.registry.get(request.name)
        if found is None:
            return ToolFailed(
                call_id=call_id, failure="unknown_tool", error=f"unknown tool {request.name!r}"
            )
        try:
            raw = json.loads(self.content.resolve(request.arguments) or "{}")
            args = found.args_model.model_validate(raw)
        except json.JSONDecodeError as exc:
            error = f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
            return ToolFailed(call_id=call_id, failure="invalid_arguments", error=error)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return ToolFailed(call_id=call_id, failure="invalid_arguments", error=problems)
        kwargs = dict(args)
        try:
            if found.context_param:
                kwargs[found.context_param] = await self._context(request)
            result = await with_heartbeat(found.fn(**kwargs))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return ToolFailed(
                call_id=call_id, failure="error", error=f"{type(exc).__name__}: {exc}"
            )
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        if self.content.fits_inline(text):
            return ToolSucceeded(call_id=call_id, output=text)
        stored = await asyncio.to_thread(self.content.store_text, text)
        return ToolSucceeded(call_id=call_id, output=stored)

    async def _context(self, request: RunToolInput) -> ToolContext:
        """What the tool may know of its call, in the run's own workspace."""
        try:
            where = (self.workspace, request.workspace, self.workspace_owner)
            # the root opens nothing: no thread hop for it (bench/active_runs.py)
            workspace = (
                run_workspace(*where)
                if request.workspace is None
                else await asyncio.to_thread(run_workspace, *where)
            )
        except OSError as exc:  # no host path in the text the model sees
            raise WorkspaceError(f"the run's workspace is not available ({exc.strerror})") from None
        return ToolContext(
            run_id=request.run_id,
            step=request.step,
            call_id=request.call_id,
            idempotency_key=request.idempotency_key,
            workspace=workspace,
            content=self.content,
            sandbox=self._limits(request),
        )
