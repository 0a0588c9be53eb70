"""The tenant as a search attribute: set at start, filtered on the server, memo as fallback.

No worker is needed: the runs stay `Running` on a task queue nobody polls, which is all a
listing looks at.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from capstan.api.auth import Principal, Scope
from capstan.api.tenancy import TENANT_KEY, TENANT_MEMO, Tenancy, TenantIndex
from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec
from capstan.core.workflow_io import WORKFLOW_NAME, StartInput
from capstan.runtime.config import Settings
from tests.integration.steer_helpers import wait_for

pytestmark = pytest.mark.server


def principal(tenant: str) -> Principal:
    return Principal(identity=f"someone@{tenant}", tenant=tenant, scopes=frozenset({Scope.READ}))


async def test_runs_carry_the_tenant_attribute_and_listings_filter_by_it(
    temporal: Client, settings: Settings
) -> None:
    client = CapstanClient(temporal, settings)
    tenancy = Tenancy(client, TenantIndex())
    acme, other = principal("acme-x"), principal("other-x")
    run_id = await tenancy.start(RunSpec(task="t"), acme)
    desc = await client.describe(run_id)
    assert desc.typed_search_attributes.get(TENANT_KEY) == "acme-x"
    # a run started before the attribute existed: the memo alone names its tenant
    old = f"old-{run_id}"
    await temporal.start_workflow(
        WORKFLOW_NAME,
        StartInput(spec=RunSpec(task="t", run_id=old)),
        id=old,
        task_queue=settings.task_queue,
        memo={TENANT_MEMO: "acme-x"},
    )
    plain = await client.start_run(RunSpec(task="t"))  # the CLI's way: tenant `default`

    async def listed(who: Principal) -> set[str]:
        return {r.run_id for r in await tenancy.runs(who, limit=500)}

    mine = await wait_for(lambda: listed(acme), lambda ids: {run_id, old} <= ids)
    assert plain not in mine
    assert not {run_id, old} & await listed(other)
    assert plain in await wait_for(lambda: listed(principal("default")), lambda ids: plain in ids)
    assert {r.run_id for r in await tenancy.open_runs(acme)} >= {run_id, old}

    # the server does the filtering: the other tenant's query does not match this run
    by_id = f"WorkflowId = '{run_id}'"
    theirs = await tenancy._scoped(by_id, "other-x")
    assert "CapstanTenant = 'other-x'" in theirs
    assert (await temporal.count_workflows(theirs)).count == 0
    assert (await temporal.count_workflows(await tenancy._scoped(by_id, "acme-x"))).count == 1
    for wf in (run_id, old, plain):
        await client.handle(wf).terminate("test over")


async def test_without_the_attribute_the_memo_alone_filters(
    temporal: Client, settings: Settings
) -> None:
    class Refusing:
        async def list_search_attributes(self, *_: Any, **__: Any) -> Any:
            from temporalio.service import RPCError, RPCStatusCode

            raise RPCError("not allowed", RPCStatusCode.PERMISSION_DENIED, b"")

    class NoOperator:
        namespace = "default"
        operator_service = Refusing()

    index = TenantIndex()
    assert await index.ready(NoOperator()) is False  # type: ignore[arg-type]
    tenancy = Tenancy(CapstanClient(temporal, settings), index)
    run_id = await tenancy.start(RunSpec(task="t"), principal("memo-only"))
    desc = await tenancy.client.describe(run_id)
    assert desc.typed_search_attributes.get(TENANT_KEY) is None
    assert await tenancy._scoped("WorkflowType = 'x'", "memo-only") == "WorkflowType = 'x'"
    await wait_for(
        lambda: tenancy.runs(principal("memo-only"), limit=500),
        lambda runs: any(r.run_id == run_id for r in runs),
    )
    assert all(r.run_id != run_id for r in await tenancy.runs(principal("acme-x"), limit=500))
    await tenancy.client.handle(run_id).terminate("test over")
