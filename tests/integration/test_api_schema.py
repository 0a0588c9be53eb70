"""The OpenAPI document against the running API, fuzzed by schemathesis: no request it makes
(valid or deliberately invalid, for unknown runs and for a real one) gets a 5xx, an undocumented
status, or a body, content type or header the document does not describe."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from capstan.api import steer_routes
from capstan.client.runs import CapstanClient
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ROOT, app_for, auth, body_of, served

pytestmark = [pytest.mark.server, pytest.mark.slow]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
#: a stream of a live run never ends: fuzzed against unknown runs only
ENDLESS = {"/api/runs/{run_id}/events"}


def fuzz(base: str, run_id: str, examples: int) -> list[str]:
    """Every operation, valid and invalid inputs; the failures, in words."""
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
        strategies = [operation.as_strategy(generation_mode=m) for m in modes]
        names = {p.name for p in operation.path_parameters}
        if "run_id" in names and operation.path not in ENDLESS:
            strategies += [
                operation.as_strategy(generation_mode=m, path_parameters={"run_id": run_id})
                for m in modes
            ]

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=st.one_of(strategies))
        def check(case: Any) -> None:
            case.call_and_validate(base_url=base, headers=auth(ROOT), checks=CHECKS, timeout=30)

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # one operation fails, the rest run
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    return failures


async def test_schemathesis_finds_nothing(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    # `?checked=true` on a run no worker polls waits this long before it goes as a signal
    monkeypatch.setattr(steer_routes, "UPDATE_TIMEOUT", 0.5)
    script = [say(call("write_file", path="a.txt", content="A"))]
    async with agent.serving(script) as live:
        run_id = await live.start(agent.spec())  # the run the fuzzer steers is not acme's ...
        await wait_pending(live.client, run_id)
        # ... so start one as acme through the API, on a queue no worker polls (fuzzed specs
        # must not run), and let the fuzzer loose on it as well as on unknown ids
        idle_settings = agent.settings.model_copy(update={"task_queue": "fuzz-idle"})
        idle = CapstanClient(live.client.client, idle_settings)
        app = app_for(idle, writes_per_minute=1_000_000)
        async with served(app) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                body = body_of(agent.spec())
                r = await http.post("/api/runs", json=body, headers=auth(ROOT))
                acme = r.json()["run_id"]
            failures = await asyncio.to_thread(fuzz, base, acme, 40)
        await live.client.cancel(run_id)
        query = "TaskQueue = 'fuzz-idle' AND ExecutionStatus = 'Running'"
        async for wf in live.client.client.list_workflows(query):
            await live.client.client.get_workflow_handle(wf.id).terminate("fuzzed")
    assert not failures, "\n".join(failures)
