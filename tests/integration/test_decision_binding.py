"""A decision binds to the exact call on the paths `test_steer_contract` does not walk: the HTTP
API (which the inbox page posts to) and a raw `temporal workflow signal` from any Temporal
client. A wrong arguments hash is refused and the call never runs, whether or not the request is
named; the right one then runs it (so each refusal is the hash's doing)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from capstan.client.runs import CapstanClient
from capstan.core.spec import TerminalReason
from capstan.core.steering import STEER
from capstan.core.tenants import workspace_subdir
from capstan.runtime.embedded import EmbeddedServer, find_temporal_binary
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending
from tests.integration.test_api_helpers import ALICE, api_client, app_for, auth, body_of

pytestmark = pytest.mark.server

SCRIPT = [say(call("write_file", path="a.txt", content="A")), say(call("finish", answer="ok"))]
WRONG = "0" * 64


async def test_the_api_refuses_a_wrong_hash_named_or_not(agent: Agent, workspace) -> None:
    async with agent.serving(SCRIPT) as live, api_client(app_for(live.client)) as http:
        r = await http.post("/api/runs", json=body_of(agent.spec()), headers=auth(ALICE))
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        (request,) = (await wait_pending(live.client, run_id)).approvals
        route = f"/api/runs/{run_id}/approve"
        for body in (
            {"args_hash": WRONG},
            {"args_hash": WRONG, "request_id": request.request_id},
        ):
            r = await http.post(route, json=body, headers=auth(ALICE))
            assert r.status_code == 409 and "hash mismatch" in r.text, (body, r.text)
        r = await http.post(route, json={"arg_hash": request.args_hash}, headers=auth(ALICE))
        assert r.status_code == 422 and "did you mean 'args_hash'" in r.text, r.text
        pending = await live.client.pending(run_id)
        assert [a.request_id for a in pending.approvals] == [request.request_id]
        tenant_dir = workspace / workspace_subdir("acme")
        assert not (tenant_dir / "a.txt").exists()
        r = await http.post(route, json={"args_hash": request.args_hash}, headers=auth(ALICE))
        assert r.status_code == 200, r.text
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert (tenant_dir / "a.txt").read_text() == "A"


async def test_a_raw_signal_with_a_wrong_hash_is_a_diagnostic(
    agent: Agent, dev_server: EmbeddedServer, workspace
) -> None:
    """What a Go or TypeScript client sends: a well-formed decision for the open request, with
    a hash of other arguments."""
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        (request,) = (await wait_pending(client, run_id)).approvals
        decision = {
            "kind": "decision",
            "id": "raw-1",
            "request_id": request.request_id,
            "args_hash": WRONG,
            "action": "approve",
        }
        await asyncio.to_thread(
            subprocess.run,
            [
                *(find_temporal_binary(), "workflow", "signal"),
                *("--address", dev_server.address, "-w", run_id, "--name", STEER),
                *("--input", json.dumps(decision)),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        diagnostics = await wait_for(
            lambda: _diagnostics(client, run_id), lambda d: any("hash mismatch" in x for x in d)
        )
        assert len(diagnostics) == 1, diagnostics
        pending = await client.pending(run_id)
        assert [a.request_id for a in pending.approvals] == [request.request_id]
        assert not (workspace / "a.txt").exists()
        await client.decide(run_id, "approve", request_id=request.request_id, checked=True)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    (record,) = run.view.records
    assert record.args_hash == request.args_hash


async def _diagnostics(client: CapstanClient, run_id: str) -> list[str]:
    return list((await client.transcript_view(run_id)).diagnostics)
