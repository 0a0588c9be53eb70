"""Subagents through `capstan serve`: a child's request is listed once, under its root run, in
`/api/pending` and in the inbox, and deciding it through the root reaches the child; a token
without `admin` cannot smuggle an unattended policy in through a delegate's definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.tenants import workspace_subdir
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import FAST, Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ALICE, ROOT, api_client, app_for, auth
from tests.integration.test_delegation import LEAD, WRITER, tree

pytestmark = pytest.mark.server


AGENTS = """
[lead]
system_prompt = "{lead}"
allowed_tools = []
delegates = ["writer"]
tuning = {{ model_initial_retry = 0.1, model_max_retry = 0.2, model_max_attempts = 3 }}

[writer]
system_prompt = "{writer}"
allowed_tools = ["write_file"]
tuning = {{ model_initial_retry = 0.1, model_max_retry = 0.2, model_max_attempts = 3 }}
{policy}
"""


def with_agents(agent: Agent, tmp_path: Path, policy: str = "") -> Agent:
    """The server's agent definitions: a lead that delegates to a writer (`policy`: more of
    the writer's definition)."""
    path = tmp_path / "agents.toml"
    path.write_text(AGENTS.format(lead=LEAD, writer=WRITER, policy=policy))
    return agent.configure(agents_file=path)


LEAD_BODY = {"task": "lead the work", "agent": "lead"}


async def test_a_childs_request_is_decided_through_its_root(agent: Agent, tmp_path: Path) -> None:
    agent = with_agents(agent, tmp_path)
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
        r = await http.post("/api/runs", json=LEAD_BODY, headers=auth(ALICE))
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
    own = agent.settings.workspace_dir / workspace_subdir("acme")  # the tenant's, inherited
    assert (own / "notes.txt").read_text() == "hello"


async def test_an_unattended_delegate_needs_an_admin_token(agent: Agent, tmp_path: Path) -> None:
    agent = with_agents(agent, tmp_path, 'tool_policy = { write_file = { decision = "allow" } }')
    async with agent.serving([]) as live, api_client(app_for(live.client)) as http:
        r = await http.post("/api/runs", json=LEAD_BODY, headers=auth(ALICE))
        assert r.status_code == 403, r.text
        assert "delegates.writer.tool_policy.write_file" in r.json()["error"]["message"]
        r = await http.post("/api/runs", json=LEAD_BODY, headers=auth(ROOT))
        assert r.status_code == 201, r.text
        await live.client.cancel(r.json()["run_id"])


async def test_a_body_never_carries_delegates(agent: Agent) -> None:
    """Delegates come from the server's definitions: a body naming its own is refused, for
    every caller (an internal field, unknown to the public request schema)."""
    writer = RunSpec(task="", system_prompt=WRITER, tuning=FAST)
    body = {"task": "lead", "delegates": {"writer": writer.model_dump(mode="json")}}
    async with agent.serving([]) as live, api_client(app_for(live.client)) as http:
        for token in (ALICE, ROOT):
            r = await http.post("/api/runs", json=body, headers=auth(token))
            assert r.status_code == 422, r.text
            assert "unknown field 'delegates'" in r.text
