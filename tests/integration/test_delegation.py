"""Subagents through a real server: children run in parallel as child workflows, their requests
are decided from the parent, budgets are carved and charged, cancel and pause reach them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from capstan.api.tenancy import TENANT_MEMO, tenant_of
from capstan.audit.trail import verify_chain
from capstan.core.spec import Budgets, GuardPolicy, RunSpec, TerminalReason
from capstan.core.workflow_io import WORKFLOW_NAME, StartInput
from capstan.testing.fake_provider import Reply, call, say
from tests.integration.helpers import record_history, run_cli
from tests.integration.scripted_agent import FAST, Agent, Live
from tests.integration.steer_helpers import wait_for, wait_pending, wait_status
from tests.integration.test_crash import TUNING as CRASH_TUNING
from tests.integration.test_crash import kill_and_recover

pytestmark = pytest.mark.server

LEAD, RESEARCHER, WRITER = "You lead.", "You research.", "You write."
PATIENT = GuardPolicy(fruitless_abort=100, fruitless_nudge=100)


def tree(**scripts: list[Reply]) -> Callable[[int, list[dict[str, Any]]], Reply]:
    """A fake's script for a whole tree: each run is told apart by its system prompt. A
    reply's `hold` delays the first attempt of that run's step (the fake itself counts
    attempts per step number, which the runs of a tree share)."""
    by_prompt = {LEAD: scripts["lead"], RESEARCHER: scripts.get("researcher", [])}
    by_prompt[WRITER] = scripts.get("writer", [])
    held: set[tuple[str, int]] = set()
    lock = threading.Lock()

    def reply(step: int, messages: list[dict[str, Any]]) -> Reply:
        prompt = messages[0]["content"]
        replies = by_prompt[prompt]
        scripted = replies[step] if step < len(replies) else say(content="(script ended)")
        with lock:
            first = (prompt, step) not in held
            held.add((prompt, step))
        if first and scripted.hold_seconds:
            time.sleep(scripted.hold_seconds)  # the fake's handler thread: one request only
        return dataclasses.replace(scripted, hold_seconds=0.0)

    return reply


def lead_spec(agent: Agent, **fields: Any) -> RunSpec:
    delegates = {
        "researcher": RunSpec(
            task="", system_prompt=RESEARCHER, allowed_tools=("list_dir",), tuning=FAST
        ),
        "writer": RunSpec(
            task="", system_prompt=WRITER, allowed_tools=("write_file",), tuning=FAST
        ),
    }
    fields.setdefault("delegates", delegates)
    return agent.spec("lead the work", system_prompt=LEAD, allowed_tools=(), **fields)


def model_calls_of(live: Live, prompt: str) -> int:
    return sum(1 for r in live.fake.requests if r["messages"][0]["content"] == prompt)


def answer_in(observation: str) -> str:
    """The child's answer inside the fence the model sees it in."""
    assert observation.startswith('<untrusted-data source="delegate">'), observation
    return observation.split("\n")[2]


async def child_called(live: Live) -> None:
    """Until the researcher's first model call has arrived (its activity is in flight)."""

    async def calls() -> int:
        return model_calls_of(live, RESEARCHER)

    await wait_for(calls, lambda n: n > 0)


async def test_two_children_in_parallel_one_approved_from_the_parent(agent: Agent) -> None:
    script = tree(
        lead=[
            say(
                call("delegate", agent="researcher", task="list the workspace"),
                call("delegate", agent="writer", task="write notes.txt"),
            ),
            say(call("finish", answer="both done")),
        ],
        researcher=[say(call("list_dir", path=".")), say(call("finish", answer="found files"))],
        writer=[
            say(call("write_file", path="notes.txt", content="hello")),
            say(call("finish", answer="wrote notes.txt")),
        ],
    )
    async with agent.serving(script) as live:
        run_id = await live.start(lead_spec(agent))
        writer_id = f"{run_id}/writer-1.1"
        # the writer's approval shows in the parent's pending, under its path
        pending = await wait_pending(live.client, run_id)
        (request,) = pending.approvals
        assert request.request_id.startswith(f"{writer_id}/1/")
        assert request.tool == "write_file"
        # the researcher finished meanwhile: the children really run side by side
        researched = await live.client.result(f"{run_id}/researcher-1.0")
        assert researched.terminal_reason is TerminalReason.COMPLETED
        # `capstan pending PARENT` lists it; `capstan approve PARENT REQ` reaches the child
        listed = await asyncio.to_thread(run_cli, agent.settings, "pending", run_id)
        assert f"{run_id}  approval  {request.request_id}  write_file(" in listed.stdout
        approved = await asyncio.to_thread(
            run_cli, agent.settings, "approve", run_id, request.request_id
        )
        assert approved.returncode == 0, approved.stderr
        run = await live.finish(run_id, history="delegation_parallel_approval")
        await record_history(live.client.handle(writer_id), "delegation_child_approved")
        writer = await live.client.result(writer_id)
        children = await live.client.children(run_id)
        audit = await asyncio.to_thread(run_cli, agent.settings, "audit", run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert run.result.output == "both done"
    assert writer.output == "wrote notes.txt"
    assert [(c.agent, c.workflow_id) for c in children] == [
        ("researcher", f"{run_id}/researcher-1.0"),
        ("writer", writer_id),
    ]
    # each child's answer is its call's observation, fenced: it may carry what the child read
    observations = [m["content"] for m in run.messages(-1, "tool")]
    assert [answer_in(o) for o in observations] == ["found files", "wrote notes.txt"]
    # the parent was charged what its children spent: 2 + 2 + 2 model calls
    assert run.result.usage.model_calls == 6
    assert run.result.usage.tool_calls == 2 + researched.usage.tool_calls + writer.usage.tool_calls
    assert (agent.settings.workspace_dir / "notes.txt").read_text() == "hello"
    # the parent's audit holds its children's trails, in the same hash chain, before its end
    assert audit.returncode == 0, audit.stderr
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert verify_chain(records) == []
    named = [(r["child"], r["agent"]) for r in records if r["kind"] == "child"]
    assert named == [(f"{run_id}/researcher-1.0", "researcher"), (writer_id, "writer")]
    decisions = [r for r in records if r["kind"] == "decision"]
    assert [d["request_id"] for d in decisions] == [request.request_id]
    ended = [r for r in records if r["kind"] == "run_ended"]
    assert [r["output"] for r in ended] == ["found files", "wrote notes.txt", "both done"]
    in_child = next(r for r in records if r["run"] != records[0]["run"] and r["kind"] != "child")
    in_child["client"] = "someone else"  # an edit inside a child's trail breaks the chain
    assert verify_chain(records)


async def test_a_child_that_would_overspend_ends_and_the_parent_goes_on(agent: Agent) -> None:
    spend = [say(call("read_result", ref="0" * 64, offset=i)) for i in range(8)]
    script = tree(
        lead=[
            say(call("delegate", agent="researcher", task="read everything")),
            say(call("finish", answer="the researcher ran out")),
        ],
        researcher=spend,
    )
    researcher = RunSpec(task="", system_prompt=RESEARCHER, guards=PATIENT, tuning=FAST)
    spec = lead_spec(agent, delegates={"researcher": researcher}, budgets=Budgets(max_tool_calls=6))
    async with agent.serving(script) as live:
        run_id = await live.start(spec)
        run = await live.finish(run_id, history="delegation_budget_carved")
        child = await live.client.result(f"{run_id}/researcher-1.0")
    # 6 calls, less the delegate call and one kept by the parent: 4 for the child
    assert child.terminal_reason is TerminalReason.BUDGET_EXHAUSTED, child
    assert child.usage.tool_calls == 4
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert run.result.usage.tool_calls == 5  # the delegate call and the child's four
    (observation,) = run.messages(-1, "tool")
    assert "ended budget_exhausted" in observation["content"]


async def test_cancelling_the_parent_cancels_the_child(agent: Agent) -> None:
    script = tree(
        lead=[say(call("delegate", agent="researcher", task="take your time"))],
        researcher=[say(call("list_dir"), hold=30.0)],
    )
    async with agent.serving(script) as live:
        run_id = await live.start(lead_spec(agent))
        await child_called(live)
        await live.client.cancel(run_id, reason="changed my mind")
        run = await live.finish(run_id, history="delegation_parent_cancelled", timeout=30)
        child = await asyncio.wait_for(live.client.result(f"{run_id}/researcher-1.0"), 30)
    assert run.result.terminal_reason is TerminalReason.CANCELLED
    assert child.terminal_reason is TerminalReason.CANCELLED


async def test_pausing_the_parent_pauses_the_child(agent: Agent) -> None:
    script = tree(
        lead=[
            say(call("delegate", agent="researcher", task="two steps")),
            say(call("finish", answer="resumed and done")),
        ],
        researcher=[
            say(call("list_dir"), hold=1.0),
            say(call("finish", answer="done after the pause")),
        ],
    )
    async with agent.serving(script) as live:
        run_id = await live.start(lead_spec(agent))
        child_id = f"{run_id}/researcher-1.0"
        await child_called(live)
        await live.client.pause(run_id)
        await wait_status(live.client, child_id, lambda s: s.paused and s.step == 1)
        await asyncio.sleep(0.5)  # paused: the child does not call its model again
        assert model_calls_of(live, RESEARCHER) == 1
        await live.client.resume(run_id)
        run = await live.finish(run_id, history="delegation_pause_forwarded", timeout=30)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert run.result.output == "resumed and done"


@pytest.mark.crash
@pytest.mark.slow
async def test_worker_killed_while_a_child_runs(agent: Agent) -> None:
    script = tree(
        lead=[
            say(call("delegate", agent="researcher", task="survive a crash")),
            say(call("finish", answer="the tree survived")),
        ],
        researcher=[
            say(call("list_dir"), hold=30.0),  # the first attempt hangs: the worker dies then
            say(call("finish", answer="listed after the crash")),
        ],
    )
    researcher = RunSpec(
        task="", system_prompt=RESEARCHER, allowed_tools=("list_dir",), tuning=CRASH_TUNING
    )
    spec = RunSpec(
        task="lead through a crash",
        system_prompt=LEAD,
        allowed_tools=(),
        tuning=CRASH_TUNING,
        delegates={"researcher": researcher},
    )

    async def child_in_flight(live: Live, run_id: str) -> None:
        await child_called(live)

    run = await kill_and_recover(agent, script, spec, child_in_flight, "delegation_worker_killed")
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert run.result.output == "the tree survived"
    (observation,) = run.messages(-1, "tool")
    assert answer_in(observation["content"]) == "listed after the crash"
    # the child's killed model call was attempted twice; nothing else was repeated
    assert model_calls_of(Live(run.client, run.fake), RESEARCHER) == 3
    assert model_calls_of(Live(run.client, run.fake), LEAD) == 2


async def test_a_child_belongs_to_its_parents_tenant(agent: Agent) -> None:
    script = tree(
        lead=[
            say(call("delegate", agent="researcher", task="look")),
            say(call("finish", answer="done")),
        ],
        researcher=[say(call("finish", answer="looked"))],
    )
    async with agent.serving(script) as live:
        spec = lead_spec(agent, run_id="tenant-parent")
        await agent.temporal.start_workflow(
            WORKFLOW_NAME,
            StartInput(spec=spec),
            id="tenant-parent",
            task_queue=agent.settings.task_queue,
            memo={TENANT_MEMO: "acme", "other": "not inherited"},
        )
        await live.finish("tenant-parent")
        child = await live.client.describe("tenant-parent/researcher-1.0")
    assert tenant_of(await child.memo()) == "acme"
    assert "other" not in await child.memo()
