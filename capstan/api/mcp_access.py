"""Who an MCP caller is, and which runs it reaches: the operator over stdio, a token's tenant
over HTTP.

Over stdio `capstan mcp` is its user's own process, like the CLI: it reaches every run and
decides in the name the CLI would. Over streamable HTTP (`capstan serve`, `/mcp`) each request
carries a bearer token of the API's tokens file, and the tools act exactly as the REST routes
do for that token: runs only through `Tenancy` (another tenant's run is unknown), starts
through `admitted` (a run may narrow what the token allows, never widen it), decisions and
answers with the `approve` scope and in the token's identity, writes through the per-token
limit. The REST routes' own functions do the work, so the two surfaces cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from capstan.api.auth import Principal, Scope
from capstan.api.backend import WriteLimiter
from capstan.api.errors import ApiError
from capstan.api.models import ApproveBody, DenyBody
from capstan.api.routes import admitted, from_agent
from capstan.api.steer_routes import decide_request, send_input
from capstan.api.tenancy import Tenancy
from capstan.client.agents import resolve_agent
from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec
from capstan.core.steering import Answer, LiveMessage

__all__ = ["Action", "OperatorAccess", "RunAccess", "TenantAccess"]

Action = Literal["approve", "deny"]


class RunAccess(Protocol):
    """The runs one MCP caller reaches, and the writes it may make to them."""

    @property
    def client(self) -> CapstanClient:
        """The Temporal client reads go through, once `reach` allowed them."""

    async def reach(self, run_id: str, scope: Scope) -> None:
        """Nothing when the caller may use `scope` on the run; an error naming why not."""

    async def start(self, spec: RunSpec) -> str:
        """Start the run (`spec.agent` names a definition of the server's); its id."""

    async def decide(
        self,
        run_id: str,
        action: Action,
        request_id: str | None,
        args_hash: str | None,
        reason: str,
    ) -> None:
        """Decide an open approval request (the only one when `request_id` is None)."""

    async def answer(self, run_id: str, request_id: str, text: str) -> None:
        """Answer an open question."""

    async def send(self, run_id: str, text: str) -> None:
        """A live message for the run's model."""


@dataclass
class OperatorAccess:
    """Every run, as the CLI reaches them (stdio: the server is its user's own process)."""

    client: CapstanClient

    async def reach(self, run_id: str, scope: Scope) -> None:
        await self.client.describe(run_id)  # RunNotFoundError names an unknown run

    async def start(self, spec: RunSpec) -> str:
        if spec.agent is not None:
            agents = self.client.settings.agents_file
            if agents is None:
                raise ValueError("this server has no agent definitions (CAPSTAN_AGENTS)")
            fields = spec.model_dump(exclude_unset=True, exclude={"task", "agent"})
            spec = resolve_agent(agents, spec.agent, spec.task, **fields)
        return await self.client.start_run(spec)

    async def decide(
        self,
        run_id: str,
        action: Action,
        request_id: str | None,
        args_hash: str | None,
        reason: str,
    ) -> None:
        await self.client.decide(run_id, action, request_id, args_hash=args_hash, reason=reason)

    async def answer(self, run_id: str, request_id: str, text: str) -> None:
        await self.client.answer(run_id, request_id, text)

    async def send(self, run_id: str, text: str) -> None:
        await self.client.send_message(run_id, text)


@dataclass
class TenantAccess:
    """One token's runs, reached as the REST routes reach them; `ApiError`s are the caller's."""

    runs: Tenancy
    principal: Principal
    limiter: WriteLimiter

    @property
    def client(self) -> CapstanClient:
        return self.runs.client

    def _may(self, scope: Scope) -> None:
        if not self.principal.may(scope):
            raise ApiError(403, "forbidden", f"this token lacks the {scope.value!r} scope")

    def _write(self, scope: Scope) -> None:
        self._may(scope)
        self.limiter.take(self.principal)

    async def reach(self, run_id: str, scope: Scope) -> None:
        self._may(scope)
        await self.runs.owned(run_id, self.principal)

    async def start(self, spec: RunSpec) -> str:
        self._write(Scope.STEER)
        if spec.agent is not None:
            spec = from_agent(spec, self.client.settings.agents_file)
        return await self.runs.start(admitted(spec, self.principal), self.principal)

    async def decide(
        self,
        run_id: str,
        action: Action,
        request_id: str | None,
        args_hash: str | None,
        reason: str,
    ) -> None:
        self._write(Scope.APPROVE)
        body: ApproveBody | DenyBody
        if action == "approve":
            body = ApproveBody(request_id=request_id, args_hash=args_hash, reason=reason)
        else:
            body = DenyBody(request_id=request_id, args_hash=args_hash, reason=reason)
        await decide_request(
            runs=self.runs, run_id=run_id, principal=self.principal, body=body, action=action
        )

    async def answer(self, run_id: str, request_id: str, text: str) -> None:
        self._write(Scope.APPROVE)
        item = Answer(request_id=request_id, text=text)
        await send_input(self.runs, run_id, self.principal, item, checked=False)

    async def send(self, run_id: str, text: str) -> None:
        self._write(Scope.STEER)
        await send_input(self.runs, run_id, self.principal, LiveMessage(text=text), False)
