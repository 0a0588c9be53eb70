"""Tenants share nothing (issue 26), through a real `capstan serve` socket with two tenants'
tokens: a file one tenant's run wrote is not in another tenant's (nor the thread's, nor the
default tenant's) workspace; no tenant can squat a thread id; and `capstan send --thread` never
delivers the default tenant's message to a workflow another tenant started at its id."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.tenants import TENANT_MEMO, TENANTS_DIR, WORKSPACE_LEAF
from capstan.core.workflow_io import WORKFLOW_NAME, StartInput
from capstan.testing.fake_provider import Reply, call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, MALLORY, ROOT, app_for, auth, served

pytestmark = pytest.mark.server

SECRET = "acme-secret-5521"


def _task(messages: list[dict[str, Any]]) -> str:
    return next(str(m.get("content")) for m in messages if m["role"] == "user")


def script(step: int, messages: list[dict[str, Any]]) -> Reply:
    """WRITE: write the secret; READ: read it and list the workspace; WAIT: ask and wait. The
    answer is what the tools said."""
    task = _task(messages)
    results = [str(m.get("content")) for m in messages if m["role"] == "tool"]
    if "WAIT" in task:
        return say(call("ask_user", question="waiting"))
    if results:
        return say(call("finish", answer=" | ".join(results)))
    if "WRITE" in task:
        return say(call("write_file", path="notes.txt", content=SECRET))
    return say(call("read_file", path="notes.txt"), call("list_dir", path="."))


async def _run(http: httpx.AsyncClient, agent: Agent, token: str, task: str) -> str:
    body = {"task": task, "auto_approve": True}  # both tokens are their tenant's admin
    started = await http.post("/api/runs", json=body, headers=auth(token))
    assert started.status_code == 201, started.text
    result = await agent.client.result(started.json()["run_id"])
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    return str(result.output)


async def test_another_tenants_run_cannot_read_a_tenants_file(agent: Agent) -> None:
    async with agent.serving(script) as live, served(app_for(live.client)) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            wrote = await _run(http, agent, ROOT, "WRITE")
            theirs = await _run(http, agent, MALLORY, "READ")
            own = await _run(http, agent, ROOT, "READ")
            thread = f"walls-{uuid.uuid4().hex[:8]}"  # one server per session: a thread of its own
            sent = await http.post(
                f"/api/threads/{thread}/messages", json={"text": "READ"}, headers=auth(ALICE)
            )
            assert sent.status_code == 200, sent.text
            in_thread = await agent.client.result(sent.json()["run_id"])
        default = await live.client.start_run(RunSpec(task="READ"))  # the CLI's tenant
        in_default = await live.client.result(default)
    assert wrote.startswith("wrote")
    assert SECRET in own  # the tenant's own runs share its workspace
    for seen in (theirs, str(in_thread.output), str(in_default.output)):
        assert SECRET not in seen and "does not exist" in seen
        assert "notes.txt" not in seen.split("|")[-1]  # not listed either
        assert TENANTS_DIR not in seen
    root = agent.settings.workspace_dir
    assert (root / TENANTS_DIR / "acme" / WORKSPACE_LEAF / "notes.txt").read_text() == SECRET
    assert not (root / "notes.txt").exists()


async def test_thread_ids_cannot_be_squatted_or_fed_across_tenants(agent: Agent) -> None:
    async with agent.serving(script) as live, served(app_for(live.client)) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            # a tenant choosing a thread's workflow id for a run: refused, whoever's it names
            squats = [
                await http.post(
                    "/api/runs", json={"task": "WAIT", "run_id": run_id}, headers=auth(MALLORY)
                )
                for run_id in ("thread-ops7", "thread-acme:t1", "thread-default:x")
            ]
        ops = f"ops{uuid.uuid4().hex[:6]}"  # `ops7`, unique in this server
        # a workflow another tenant holds at `thread-ops7` (squatted before the ids were
        # reserved, or started by a raw Temporal client): the CLI must not feed it
        await live.client.client.start_workflow(
            WORKFLOW_NAME,
            StartInput(spec=RunSpec(task="WAIT", run_id=f"thread-{ops}")),
            id=f"thread-{ops}",
            task_queue=agent.settings.task_queue,
            memo={TENANT_MEMO: "other"},
        )
        fed = await asyncio.to_thread(
            run_cli, agent.settings, "send", "--thread", ops, "the default tenant's secret"
        )
        # the default tenant naming acme's thread: refused (it could only squat it)
        named = await asyncio.to_thread(
            run_cli, agent.settings, "send", "--thread", "acme:t1", "hello"
        )
        history = await live.client.handle(f"thread-{ops}").fetch_history()
        await live.client.handle(f"thread-{ops}").terminate("test over")
    for refused in squats:
        assert refused.status_code == 422 and "thread-" in refused.text, refused.text
    assert fed.returncode == 2 and "another tenant" in fed.stderr, fed.stderr
    signalled = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signalled == []  # the other tenant's run never got the message
    assert named.returncode == 2 and "bad thread id" in named.stderr, named.stderr
