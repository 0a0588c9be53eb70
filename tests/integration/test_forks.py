"""Forks (issue 32): a new run from another run's recorded conversation after step N.

The fake provider logs every request: a fork's first request is exactly what the parent's call
N+1 was given (so none of the prefix is called again), and its history names the parent.
"""

from __future__ import annotations

import asyncio

import pytest

from capstan.audit.history import decode_history, load_histories
from capstan.client.forks import ForkError, fork
from capstan.core.spec import ForkPoint, TerminalReason
from capstan.core.workflow_io import StartInput
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import ALICE, MALLORY, api_client, app_for, auth, body_of

pytestmark = pytest.mark.server

SCRIPT = [
    say(call("list_dir")),
    say(call("write_file", path="notes.txt", content="one")),
    say(call("finish", answer="parent done")),
    # the forks' replies, by step: a fork at step 2 asks for step index 2 again
]


def _user_and_tools(request: dict[str, object]) -> list[object]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [(m["role"], m.get("content")) for m in messages if m["role"] != "system"]


async def test_a_fork_repeats_no_call_of_its_prefix_and_names_its_parent(
    agent: Agent, workspace
) -> None:
    async with agent.serving(SCRIPT) as live:
        client = live.client
        parent = await live.start(agent.spec(auto_approve=True))
        result = await asyncio.wait_for(client.result(parent), 60)
        assert result.terminal_reason is TerminalReason.COMPLETED and result.steps == 3
        calls_before = len(live.fake.requests)

        forked = await fork(client, parent, 2)
        ended = await asyncio.wait_for(client.result(forked), 60)
        fork_requests = live.fake.requests[calls_before:]

        # from the command line, with another system prompt, at step 0
        prompt = workspace / "system.txt"
        prompt.write_text("You are the forked agent.")
        shown = await asyncio.to_thread(
            run_cli, agent.settings, "fork", parent, "--at-step", "0", "--system", str(prompt)
        )
        assert shown.returncode == 0, shown.stderr
        second = shown.stdout.strip()
        await asyncio.wait_for(client.result(second), 60)

        # a step the parent never made: one line, exit 2
        past = await asyncio.to_thread(run_cli, agent.settings, "fork", parent, "--at-step", "9")
        with pytest.raises(ForkError, match=r"--at-step is 0\.\.3, not 9"):
            await fork(client, parent, 9)
        histories = await load_histories(client.client, forked)
        audit = await asyncio.to_thread(run_cli, agent.settings, "audit", forked, "--format", "md")

    # one model call: step 3 of the parent's conversation, with exactly its input
    assert len(fork_requests) == 1
    parents_third = live.fake.requests[2]
    assert fork_requests[0]["messages"] == parents_third["messages"]
    assert ended.terminal_reason is TerminalReason.COMPLETED and ended.steps == 1
    # the fork's history names its parent and the step
    started = decode_history(histories[0])[0]
    assert isinstance(started.data, StartInput)
    assert started.data.spec.forked_from == ForkPoint(run_id=parent, step=2)
    # its audit names the prefix once (the parent's) and holds only its own model call
    assert f"| Forked from | run {parent} after step 2" in audit.stdout, audit.stdout
    assert audit.stdout.count("model call") <= 2
    # at step 0 with another system prompt: the task again, under the new prompt
    second_request = live.fake.requests[calls_before + 1]["messages"]
    assert second_request[0] == {"role": "system", "content": "You are the forked agent."}
    assert _user_and_tools({"messages": second_request}) == _user_and_tools(live.fake.requests[0])
    assert past.returncode == 2 and past.stderr.count("\n") == 1
    assert "has made 3 model call(s)" in past.stderr


async def test_a_fork_with_another_system_prompt_rewrites_the_chain_not_the_steps(
    agent: Agent, workspace
) -> None:
    """After step 2 with a new system prompt: the model sees the same steps under the new
    prompt (the chain is written again from its first segment); the parent is untouched."""
    async with agent.serving(SCRIPT) as live:
        client = live.client
        parent = await live.start(agent.spec(auto_approve=True))
        await asyncio.wait_for(client.result(parent), 60)
        forked = await fork(client, parent, 2, system="Be brief.")
        await asyncio.wait_for(client.result(forked), 60)
        parent_transcript = await client.transcript_view(parent)
    third, forks_first = live.fake.requests[2]["messages"], live.fake.requests[3]["messages"]
    assert forks_first[0] == {"role": "system", "content": "Be brief."}
    assert forks_first[1:] == third[1:]
    assert parent_transcript.conversation is not None


async def test_a_fork_through_the_api_stays_in_its_tenant(agent: Agent, workspace) -> None:
    """`POST /api/runs/{id}/fork`: the owner's fork makes one call; another tenant's parent is
    unknown (404); a step past the end, an internal field and a field a token may not widen
    are refused in the API's error shape."""
    async with (
        agent.serving(SCRIPT) as live,
        api_client(app_for(live.client)) as http,
    ):
        r = await http.post("/api/runs", json=body_of(agent.spec()), headers=auth(ALICE))
        assert r.status_code == 201, r.text
        parent = r.json()["run_id"]
        await wait_pending(live.client, parent)  # write_file waits for a person
        await live.client.decide(parent, "approve")
        await asyncio.wait_for(live.client.result(parent), 60)
        before = len(live.fake.requests)
        url = f"/api/runs/{parent}/fork"
        r = await http.post(url, json={"at_step": 2}, headers=auth(ALICE))
        assert r.status_code == 201, r.text
        forked = r.json()["run_id"]
        ended = await asyncio.wait_for(live.client.result(forked), 60)
        stranger = await http.post(url, json={"at_step": 2}, headers=auth(MALLORY))
        past = await http.post(url, json={"at_step": 7}, headers=auth(ALICE))
        internal = await http.post(
            url, json={"at_step": 1, "spec": {"workspace": "x"}}, headers=auth(ALICE)
        )
        wider = await http.post(
            url, json={"at_step": 1, "spec": {"fairness_weight": 50}}, headers=auth(ALICE)
        )
    assert ended.terminal_reason is TerminalReason.COMPLETED
    assert len(live.fake.requests) - before == 1
    assert stranger.status_code == 404
    assert past.status_code == 422 and past.json()["error"]["field"] == "body.at_step"
    assert (
        internal.status_code == 422 and internal.json()["error"]["field"] == "body.spec.workspace"
    )
    assert wider.status_code == 403, wider.text
