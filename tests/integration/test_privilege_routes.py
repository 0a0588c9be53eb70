"""A run may narrow what the worker allows, never widen it: `capstan serve` driven as an outside
client would, with a token without `admin` (alice) and acme's admin (root).

The table: every route that starts a run by every spec field that widens the gate (each refused
for alice, on the final spec, an agent's definition included), then what the worker's policy
file keeps denied whatever the caller's spec says and approves, and a thread whose next run
takes its privileges from the sender of the message. Runs are real (dev server, scripted fake
model, in-process worker).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.core.spec import TerminalReason
from capstan.core.tenants import workspace_subdir
from capstan.core.workflow_io import StartInput
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ALICE, ROOT, api_client, app_for, auth

pytestmark = pytest.mark.server

#: field -> (a body that sets it, an agent definition that sets it, what the refusal names)
WIDENING: dict[str, tuple[dict[str, Any], str, str]] = {
    "auto_approve": ({"auto_approve": True}, "auto_approve = true", "auto_approve"),
    "waive_rule_of_two": (
        {"waive_rule_of_two": True},
        "waive_rule_of_two = true",
        "waive_rule_of_two",
    ),
    "tool_policy allow": (
        {"tool_policy": {"write_file": {"decision": "allow"}}},
        'tool_policy = { write_file = { decision = "allow" } }',
        "tool_policy.write_file",
    ),
    "sandbox.network": (
        {"sandbox": {"network": True}},
        "sandbox = { network = true }",
        "sandbox.network",
    ),
}
#: fields anyone may set: they narrow, or the worker lowers them to its own (sandbox limits)
NARROWING: dict[str, tuple[dict[str, Any], str]] = {
    "tool_policy deny": (
        {"tool_policy": {"write_file": {"decision": "deny"}}},
        'tool_policy = { write_file = { decision = "deny" } }',
    ),
    "sandbox limits": (
        {"sandbox": {"memory_bytes": 1 << 36, "processes": 100000}},
        "sandbox = { memory_bytes = 68719476736, processes = 100000 }",
    ),
}


def _agents(tmp_path: Path) -> Path:
    tables = [f"[{_name(f)}]\n{line}\nmax_steps = 2\n" for f, (_, line, _) in WIDENING.items()]
    tables += [f"[{_name(f)}]\n{line}\nmax_steps = 2\n" for f, (_, line) in NARROWING.items()]
    path = tmp_path / "agents.toml"
    path.write_text("\n".join(tables))
    return path


def _name(field: str) -> str:
    return field.replace(" ", "-").replace(".", "-")


async def _start(
    http: httpx.AsyncClient, route: str, field: str, body: dict[str, Any], token: str
) -> httpx.Response:
    task = {"task": "t", "max_steps": 2}
    if route == "POST /api/runs":
        return await http.post("/api/runs", json={**task, **body}, headers=auth(token))
    if route == "POST /api/runs {agent}":
        return await http.post(
            "/api/runs", json={**task, "agent": _name(field)}, headers=auth(token)
        )
    url = f"/api/threads/priv-{_name(field)}-{token[:4]}/messages"
    return await http.post(url, json={"text": "t", "agent": _name(field)}, headers=auth(token))


ROUTES = ("POST /api/runs", "POST /api/runs {agent}", "POST /api/threads/{thread}/messages {agent}")


async def test_every_route_refuses_a_widening_spec_without_admin(
    agent: Agent, tmp_path: Path
) -> None:
    agent.configure(agents_file=_agents(tmp_path))
    started: list[str] = []
    table: dict[tuple[str, str, str], int] = {}
    async with (
        agent.serving([say(call("finish", answer="ok"))] * 4) as live,
        api_client(app_for(live.client)) as http,
    ):
        for route in ROUTES:
            for field, (body, _, named) in WIDENING.items():
                r = await _start(http, route, field, body, ALICE)
                table[(route, field, "alice")] = r.status_code
                assert r.status_code != 403 or named in r.json()["error"]["message"], r.text
            for field, (body, _) in NARROWING.items():
                r = await _start(http, route, field, body, ALICE)
                table[(route, field, "alice")] = r.status_code
                started.append(r.json().get("run_id", ""))
            r = await _start(http, route, "auto_approve", WIDENING["auto_approve"][0], ROOT)
            table[(route, "auto_approve", "root")] = r.status_code
            started.append(r.json().get("run_id", ""))
        for run_id in started:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(live.client.result(run_id), 30)
    ok = {"POST /api/runs": 201, "POST /api/runs {agent}": 201}
    expected = {
        **{(route, field, "alice"): 403 for route in ROUTES for field in WIDENING},
        **{(route, field, "alice"): ok.get(route, 200) for route in ROUTES for field in NARROWING},
        **{(route, "auto_approve", "root"): ok.get(route, 200) for route in ROUTES},
    }
    assert table == expected


POLICIES = {
    # the worker denies writes under secrets/; the run's own pattern for `path` must not replace it
    "deny_arguments": (
        '[tools.write_file]\ndeny_arguments = { path = "^secrets/" }\n',
        {"decision": "ask", "deny_arguments": {"path": "^nothing$"}},
    ),
    # the worker denies the tool; the run asks for `ask` instead
    "decision": ('[tools.write_file]\ndecision = "deny"\n', {"decision": "ask"}),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_a_worker_deny_stays_denied_when_the_caller_asks_and_approves(
    agent: Agent, tmp_path: Path, workspace: Path, policy: str
) -> None:
    text, rule = POLICIES[policy]
    (tmp_path / "policy.toml").write_text(text)
    agent.configure(policy_file=tmp_path / "policy.toml")
    script = [
        say(call("write_file", path="secrets/key.txt", content="stolen")),
        say(call("finish", answer="done")),
    ]
    body = {"task": "write it", "max_steps": 4, "tool_policy": {"write_file": rule}}
    approved = 0
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        r = await http.post("/api/runs", json=body, headers=auth(ALICE))
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        ending = asyncio.create_task(live.client.result(run_id))
        async with asyncio.timeout(60):
            while not ending.done():  # approve whatever the run asks, as the caller would
                pending = (
                    await http.get(f"/api/runs/{run_id}/pending", headers=auth(ALICE))
                ).json()
                for request in pending["approvals"]:
                    decision = {"request_id": request["request_id"]}
                    url = f"/api/runs/{run_id}/approve"
                    await http.post(url, json=decision, headers=auth(ALICE))
                    approved += 1
                await asyncio.sleep(0.1)
        result = await ending
        steps = (await http.get(f"/api/runs/{run_id}/transcript", headers=auth(ALICE))).json()
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert approved == 0  # never even asked: denied before any approval
    assert not (workspace / workspace_subdir("acme") / "secrets" / "key.txt").exists()
    assert "denied" in str(steps), steps


async def test_a_threads_next_run_takes_its_privileges_from_the_sender(
    agent: Agent, tmp_path: Path, workspace: Path
) -> None:
    """root's thread runs unattended; alice's message to it starts the next run, which asks."""
    (tmp_path / "agents.toml").write_text(
        "[unattended]\nauto_approve = true\nwaive_rule_of_two = true\n"
        'sandbox = { network = true }\ntool_policy = { write_file = { decision = "allow" } }\n'
    )
    agent.configure(agents_file=tmp_path / "agents.toml")
    script = [
        say(call("finish", answer="first")),
        say(call("write_file", path="notes.txt", content="unattended")),
        say(call("finish", answer="second")),
    ]
    url = "/api/threads/priv-thread/messages"
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        r = await http.post(url, json={"text": "one", "agent": "unattended"}, headers=auth(ROOT))
        assert r.status_code == 200, r.text
        run_id = r.json()["run_id"]
        first = await live.client.result(run_id)
        r = await http.post(url, json={"text": "two"}, headers=auth(ALICE))
        assert r.status_code == 200 and r.json()["started"], r.text
        second_execution = r.json()["execution"]
        pending = await wait_pending(live.client, run_id)  # it asks: alice holds no auto_approve
        handle = live.client.client.get_workflow_handle(run_id, run_id=second_execution)
        history = await handle.fetch_history()
        await live.client.cancel(run_id)
        await live.client.result(run_id)
    assert first.output == "first"
    (payload,) = history.events[0].workflow_execution_started_event_attributes.input.payloads
    spec = StartInput.model_validate_json(payload.data).spec
    assert (spec.auto_approve, spec.waive_rule_of_two, spec.sandbox.network) == (False,) * 3
    assert spec.tool_policy["write_file"].decision is None and spec.agent == "unattended"
    assert [a.tool for a in pending.approvals] == ["write_file"]
    assert not (workspace / workspace_subdir("acme/threads/priv-thread") / "notes.txt").exists()
