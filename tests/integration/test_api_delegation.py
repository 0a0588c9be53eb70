"""Subagents through `capstan serve`: a child's request is listed once, under its root run, in
`/api/pending` and in the inbox, and deciding it through the root reaches the child; a token
without `admin` cannot smuggle an unattended policy in through a delegate's definition."""

from __future__ import annotations

import pytest

from capstan.core.spec import RunSpec, TerminalReason, ToolRule
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import FAST, Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ALICE, ROOT, api_client, app_for, auth
from tests.integration.test_delegation import LEAD, WRITER, tree

pytestmark = pytest.mark.server


def lead_body(agent: Agent, writer: RunSpec | None = None) -> dict[str, object]:
    writer = writer or RunSpec(
        task="", system_prompt=WRITER, allowed_tools=("write_file",), tuning=FAST
    )
    spec = agent.spec(
        "lead the work", system_prompt=LEAD, allowed_tools=(), delegates={"writer": writer}
    )
    return spec.model_dump(mode="json", exclude_none=True)


async def test_a_childs_request_is_decided_through_its_root(agent: Agent) -> None:
    script = tree(
        lead=[
            say(call("delegate", agent="writer", task="write notes.txt")),
            say(call("finish", answer="done")),
        ],
        writer=[
            say(call("write_file", path="notes.txt", content="hello")),
            say(call("finish", answer="wrote notes.txt")),
        ],
    )
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        r = await http.post("/api/runs", json=lead_body(agent), headers=auth(ALICE))
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        child_id = f"{run_id}/writer-1.0"
        (request,) = (await wait_pending(live.client, run_id)).approvals
        assert request.request_id.startswith(f"{child_id}/")
        # listed once, under the root (the child is a running run of the tenant too)
        pending = (await http.get("/api/pending", headers=auth(ALICE))).json()
        listed = [v["run_id"] for v in pending]  # (other tests' runs of the tenant may wait too)
        assert listed.count(run_id) == 1 and child_id not in listed, listed
        (mine,) = [v for v in pending if v["run_id"] == run_id]
        assert [a["request_id"] for a in mine["approvals"]] == [request.request_id]
        # the inbox shows it as a card of the root, which is where its buttons post
        page = await http.get("/inbox/items", params={"run": run_id}, headers=auth(ALICE))
        assert page.status_code == 200, page.text
        assert f'data-run="{run_id}"' in page.text and request.request_id in page.text
        r = await http.post(
            f"/api/runs/{run_id}/approve",
            json={"request_id": request.request_id},
            headers=auth(ALICE),
        )
        assert r.status_code == 200, r.text
        run = await live.finish(run_id)
        child = await live.client.result(child_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert child.output == "wrote notes.txt"
    assert (agent.settings.workspace_dir / "notes.txt").read_text() == "hello"


async def test_an_unattended_delegate_needs_an_admin_token(agent: Agent) -> None:
    allow = RunSpec(
        task="",
        system_prompt=WRITER,
        tool_policy={"write_file": ToolRule(decision="allow")},
        tuning=FAST,
    )
    async with agent.serving([]) as live, api_client(app_for(live.client)) as http:
        r = await http.post("/api/runs", json=lead_body(agent, allow), headers=auth(ALICE))
        assert r.status_code == 403, r.text
        assert "delegates.writer.tool_policy.write_file" in r.json()["error"]["message"]
        r = await http.post("/api/runs", json=lead_body(agent, allow), headers=auth(ROOT))
        assert r.status_code == 201, r.text
        await live.client.cancel(r.json()["run_id"])
