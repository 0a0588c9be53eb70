"""Runs as one tenant sees them: the API's only way to a run.

A run belongs to the tenant that started it: `capstan serve` writes the tenant into the
workflow's memo at start (`TENANT_MEMO`; the memo is kept across continue-as-new), and into the
Keyword search attribute `CapstanTenant` when the namespace has it (`TenantIndex`: the embedded
server registers it at start; on a cluster the API registers it, or runs without it). Listings
ask the server for the tenant's runs plus the runs with no attribute (started before it, or
elsewhere), and check the memo of each: the memo stays the truth, the attribute spares reading
every other tenant's runs. Runs started elsewhere (the CLI, Python) carry no tenant and belong
to `default`. Every route reaches a run
through `Tenancy.owned`, which answers another tenant's run exactly as an unknown one (404), so
nothing about it leaks. Run ids are restricted to a safe alphabet (`RUN_ID_PATTERN`): the
history readers put ids into visibility queries.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError

from capstan.api.auth import Principal
from capstan.api.errors import ApiError, not_found
from capstan.client.priority import priority_of
from capstan.client.runs import CapstanClient, RunNotFoundError, RunSummary
from capstan.core import privilege, tenants
from capstan.core.spec import RunSpec
from capstan.core.workflow_io import (
    REQUESTS_MEMO,
    TERMINAL_MEMO,
    WORKFLOW_NAME,
    OpenRequests,
    StartInput,
)
from capstan.runtime.embedded import TENANT_SEARCH_ATTRIBUTE

__all__ = [
    "DEFAULT_TENANT",
    "RUN_ID_PATTERN",
    "TENANT_KEY",
    "TENANT_MEMO",
    "OpenRun",
    "Tenancy",
    "TenantIndex",
    "tenant_of",
]

TENANT_MEMO = "capstan_tenant"
DEFAULT_TENANT = "default"
#: run ids the API accepts (path parameters and `RunSpec.run_id`). Python checks it with
#: `fullmatch`: its `$` also matches before a trailing newline, so `match` let "run-1\n" in;
#: pydantic (path parameters) runs it in Rust's engine, where `$` is the end of the text
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
_RUN_ID = re.compile(RUN_ID_PATTERN)
TENANT_KEY = SearchAttributeKey.for_keyword(TENANT_SEARCH_ATTRIBUTE)
#: tenants that may appear in a visibility query as they are (others are filtered by memo)
_QUERYABLE = re.compile(r"^[A-Za-z0-9._:@ -]{1,200}$")

log = logging.getLogger("capstan.api")


def tenant_of(memo: Mapping[str, Any]) -> str:
    tenant = memo.get(TENANT_MEMO)
    return tenant if isinstance(tenant, str) and tenant else DEFAULT_TENANT


@dataclass(frozen=True)
class OpenRun:
    """A running run of the tenant, with what it announced in its memo."""

    run_id: str
    started: str
    requests: OpenRequests


class TenantIndex:
    """Whether the namespace has the `CapstanTenant` search attribute: asked once per server
    process, and registered when missing and the server lets us (a dev server or a self-hosted
    cluster; Temporal Cloud needs `tcld` or its UI). Without it the API filters by memo alone."""

    def __init__(self) -> None:
        self._known: bool | None = None
        self._lock = asyncio.Lock()

    async def ready(self, client: Client) -> bool:
        if self._known is None:
            async with self._lock:
                if self._known is None:
                    self._known = await _ensure_attribute(client)
        return self._known


async def _ensure_attribute(client: Client) -> bool:
    namespace = client.namespace
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        if TENANT_SEARCH_ATTRIBUTE in listed.custom_attributes:
            return True
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    TENANT_SEARCH_ATTRIBUTE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                },
            )
        )
    except RPCError as exc:
        log.warning(
            "search attribute %s unavailable (%s); tenants are filtered by memo only: "
            "register it with `temporal operator search-attribute create --name %s --type "
            "Keyword`",
            TENANT_SEARCH_ATTRIBUTE,
            exc.message,
            TENANT_SEARCH_ATTRIBUTE,
        )
        return False
    log.info("registered the search attribute %s", TENANT_SEARCH_ATTRIBUTE)
    return True


class Tenancy:
    """A `CapstanClient` seen through one tenant's eyes."""

    def __init__(self, client: CapstanClient, index: TenantIndex | None = None) -> None:
        self.client = client
        self.index = index or TenantIndex()

    async def owned(self, run_id: str, principal: Principal) -> WorkflowExecutionDescription:
        """The run's description, if the principal's tenant owns it; 404 otherwise."""
        if not _RUN_ID.fullmatch(run_id):
            raise not_found(run_id)
        try:
            desc = await self.client.describe(run_id)
        except RunNotFoundError:
            raise not_found(run_id) from None
        if tenant_of(await desc.memo()) != principal.tenant:
            raise not_found(run_id)
        return desc

    async def start(self, spec: RunSpec, principal: Principal) -> str:
        """Start a run owned by the principal's tenant. An id is never reused, so an id names
        one run (and one tenant) forever."""
        if spec.run_id is not None and not _RUN_ID.fullmatch(spec.run_id):
            raise ApiError(
                422, "invalid", f"run_id must match {RUN_ID_PATTERN}", field="body.run_id"
            )
        if spec.run_id is not None and tenants.reserved_run_id(spec.run_id):
            raise ApiError(
                422, "invalid", "run ids starting with 'thread-' are threads'", field="body.run_id"
            )
        run_id = spec.run_id or f"run-{uuid.uuid4().hex[:12]}"
        # the tenant's own workspace (None for `default`: the worker's root)
        workspace = tenants.workspace_key(principal.tenant)
        spec = spec.model_copy(update={"run_id": run_id, "workspace": workspace})
        spec = privilege.fair_share(spec, principal.tenant, principal.scopes)
        await self.client.client.start_workflow(
            WORKFLOW_NAME,
            StartInput(spec=spec),
            id=run_id,
            task_queue=self.client.settings.task_queue,
            priority=priority_of(spec),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            **await self.ownership(principal),
        )
        return run_id

    async def ownership(self, principal: Principal) -> dict[str, Any]:
        """The start options that make a run the principal's tenant's: the memo entry, and the
        search attribute when the namespace has it."""
        indexed = await self.index.ready(self.client.client)
        pairs = [SearchAttributePair(TENANT_KEY, principal.tenant)] if indexed else []
        return {
            "memo": {TENANT_MEMO: principal.tenant},
            "search_attributes": TypedSearchAttributes(pairs),
        }

    async def _scoped(self, query: str, tenant: str) -> str:
        """`query` narrowed on the server to the tenant's runs and the runs with no tenant
        attribute (the memo decides those), when the namespace has the attribute."""
        if not _QUERYABLE.fullmatch(tenant) or not await self.index.ready(self.client.client):
            return query
        name = TENANT_SEARCH_ATTRIBUTE
        return f"{query} AND ({name} = '{tenant}' OR {name} IS NULL)"

    async def _listed(self, principal: Principal, query: str) -> AsyncIterator[WorkflowExecution]:
        """Workflows matching `query` that belong to the tenant, newest first, each run id of a
        continue-as-new chain once."""
        seen: set[str] = set()
        query = await self._scoped(query, principal.tenant)
        async for wf in self.client.client.list_workflows(query):
            if wf.id in seen:
                continue
            seen.add(wf.id)
            if tenant_of(await wf.memo()) == principal.tenant and _RUN_ID.fullmatch(wf.id):
                yield wf

    async def runs(
        self, principal: Principal, limit: int, terminal_reason: str | None = None
    ) -> list[RunSummary]:
        """The tenant's runs as `capstan ls --json` lists them."""
        out: list[RunSummary] = []
        query = f"WorkflowType = '{WORKFLOW_NAME}'"
        async for wf in self._listed(principal, query):
            reason = (await wf.memo()).get(TERMINAL_MEMO)
            summary = RunSummary(
                run_id=wf.id,
                status=wf.status.name.lower() if wf.status else "unknown",
                started=wf.start_time.isoformat(timespec="seconds"),
                terminal_reason=reason if isinstance(reason, str) else None,
            )
            if terminal_reason is not None and summary.terminal_reason != terminal_reason:
                continue
            out.append(summary)
            if len(out) >= limit:
                break
        return out

    async def open_runs(self, principal: Principal, limit: int = 200) -> list[OpenRun]:
        """The tenant's running runs with the requests each announced: one listing call for
        all of them, since the memo travels with the listing."""
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"
        out: list[OpenRun] = []
        async for wf in self._listed(principal, query):
            raw = (await wf.memo()).get(REQUESTS_MEMO)
            requests = OpenRequests.model_validate(raw) if raw else OpenRequests()
            started = wf.start_time.isoformat(timespec="seconds")
            out.append(OpenRun(run_id=wf.id, started=started, requests=requests))
            if len(out) >= limit:
                break
        return out
