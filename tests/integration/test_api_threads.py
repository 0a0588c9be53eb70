"""Threads through `capstan serve`: a tenant's messages start and continue its thread, its runs
are listed, and another tenant neither sees it nor reaches it (its same-named thread is its own)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import Reply, call, say
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, MALLORY, READER, api_client, app_for, auth

pytestmark = pytest.mark.server


def remembers(step: int, messages: list[dict[str, Any]]) -> Reply:
    """Answers with the code if any earlier message of the conversation gave it."""
    said = " ".join(str(m.get("content") or "") for m in messages)
    return say(call("finish", answer="7141" if "7141" in said else "unknown"))


async def test_a_tenants_thread_goes_on_across_runs_and_stays_its_own(agent: Agent) -> None:
    async with agent.serving(remembers) as live, api_client(app_for(live.client)) as http:
        url = "/api/threads/t1/messages"
        first = await http.post(url, json={"text": "Remember: 7141."}, headers=auth(ALICE))
        assert first.status_code == 200, first.text
        sent = first.json()
        assert sent["thread"] == "t1" and sent["started"] is True
        run_id = sent["run_id"]
        assert run_id == "thread-acme:t1"  # scoped to the tenant
        await live.client.result(run_id)
        second = await http.post(url, json={"text": "What is the code?"}, headers=auth(ALICE))
        assert second.status_code == 200, second.text
        assert second.json()["started"] is True
        answer = await live.client.result(run_id)
        listed = await http.get("/api/threads/t1", headers=auth(READER))
        # another tenant: the thread does not exist for it, and its own "t1" is another thread
        theirs = await http.get("/api/threads/t1", headers=auth(MALLORY))
        other = await http.post(url, json={"text": "hello"}, headers=auth(MALLORY))
        assert other.status_code == 200, other.text
        await live.client.result(other.json()["run_id"])
        after = await http.get("/api/threads/t1", headers=auth(READER))
        refused = await http.post(url, json={"text": "x"}, headers=auth(READER))
        as_run = await http.post(
            "/api/runs", json={"task": "x", "thread": "t1"}, headers=auth(ALICE)
        )
        trail = await http.get(f"/api/runs/{run_id}/audit", headers=auth(READER))
    # each message is recorded in the sender's name (the token's), not the server's
    records = [json.loads(line) for line in trail.text.splitlines()]
    said = [(r["text"], r["identity"]) for r in records if r.get("kind") == "send_message"]
    assert said == [("What is the code?", "alice@acme")], said
    assert answer.terminal_reason is TerminalReason.COMPLETED
    assert answer.output == "7141"  # the second run saw the first run's conversation
    assert listed.status_code == 200, listed.text
    assert [r["terminal_reason"] for r in listed.json()] == ["completed", "completed"]
    assert theirs.status_code == 404 and "acme" not in theirs.text
    assert other.json()["run_id"] == "thread-other:t1"
    assert len(after.json()) == 2  # untouched by the other tenant's message
    assert refused.status_code == 403
    assert as_run.status_code == 422 and "/api/threads/" in as_run.text
