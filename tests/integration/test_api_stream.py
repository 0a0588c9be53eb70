"""The SSE stream of a run on a real socket: stable ids, resumable with Last-Event-ID across
continue-as-new and a worker restart (nothing lost, nothing repeated), streamed model text as
ephemeral events, an end event; and the same numbers as `derive_events` over the history."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from capstan.audit.events import derive_events
from capstan.audit.history import decode_history, load_histories
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_api_helpers import (
    ALICE,
    MALLORY,
    SseEvent,
    app_for,
    auth,
    body_of,
    read_sse,
    served,
)

pytestmark = [pytest.mark.server, pytest.mark.slow]

STREAMED = "Thinking about the listing, one token at a time. " * 4


async def collect(
    http: httpx.AsyncClient,
    url: str,
    until: Any,
    headers: dict[str, str],
    out: list[SseEvent],
) -> None:
    """Read the stream into `out` until `until(event)` is true or the stream ends."""
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for event in read_sse(response):
            out.append(event)
            if until(event):
                return


def durable(events: list[SseEvent]) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if e.event == "run_event":
            assert e.id == str(e.data["seq"])  # the SSE id is the stable number
            out.append(e.data)
        else:
            assert e.id is None  # ephemeral events leave the resume point alone
    return out


async def test_resume_across_continue_as_new_and_a_worker_restart(agent: Agent) -> None:
    script = [
        say(call("list_dir"), hold=0.3),
        say(call("list_dir"), content=STREAMED, chunk_delay=0.08),
        say(call("list_dir"), hold=0.3),
        say(call("write_file", path="out.txt", content="done")),
        say(call("list_dir")),
        say(call("finish", answer="ok")),
    ]
    first: list[SseEvent] = []
    second: list[SseEvent] = []
    with FakeProvider(script) as fake:
        async with (
            agent.serving(fake) as live,
            served(app_for(live.client)) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            body = body_of(agent.spec(continue_as_new_every=2))
            r = await http.post("/api/runs", json=body, headers=auth(ALICE))
            run_id = r.json()["run_id"]
            url = f"/api/runs/{run_id}/events?include=continued_as_new"  # every event
            # mid-run, after the chain has continued as new at least once
            await collect(
                http,
                url,
                lambda e: e.data.get("kind") == "step_started" and e.data["step"] == 4,
                auth(ALICE),
                first,
            )
            await wait_pending(live.client, run_id)
            mallory = await http.get(url, headers=auth(MALLORY))
        # the worker is gone: the stream resumes from history alone, then waits for more
        last = durable(first)[-1]["seq"]
        resumed = {**auth(ALICE), "Last-Event-ID": str(last)}
        async with (
            served(app_for(agent.client)) as base,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            reader = asyncio.create_task(
                collect(http, url, lambda e: e.event == "end", resumed, second)
            )
            async with agent.serving(fake) as live:  # a new worker takes the run over
                await live.client.decide(run_id, "approve")
                await asyncio.wait_for(reader, 60)
                result = await live.client.result(run_id)
                histories = await load_histories(live.client.client, run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert mallory.status_code == 404
    expected = [
        e.model_dump(mode="json") for e in derive_events([decode_history(h) for h in histories])
    ]
    got = durable(first) + durable(second)
    assert [e["seq"] for e in got] == list(range(len(expected)))  # nothing lost or repeated
    assert got == expected
    kinds = [e["kind"] for e in got]
    assert kinds.count("continued_as_new") >= 2 and kinds[-1] == "run_ended"
    assert kinds.index("continued_as_new") < len(durable(first))  # resumed after one
    texts = [e.data for e in first if e.event == "text"]
    assert texts and all(t["step"] == 2 and t["text"] in STREAMED for t in texts)
    end = second[-1]
    assert end.event == "end" and end.id is None
    assert end.data == {
        "run_id": run_id,
        "terminal_reason": "completed",
        "next": len(expected),
        "output_format": "text",  # the run's answer, as `GET /api/runs/{id}` shows it
        "output": result.output,
    }


async def test_from_an_offset_and_after_the_end(agent: Agent) -> None:
    """`?from=N` starts at event N; a closed run's stream replays and ends; resuming after the
    last event gets only the end."""
    async with agent.serving([say(call("list_dir")), say(call("finish", answer="ok"))]) as live:
        async with served(app_for(live.client)) as base, httpx.AsyncClient(base_url=base) as http:
            body = body_of(agent.spec())
            run_id = (await http.post("/api/runs", json=body, headers=auth(ALICE))).json()["run_id"]
            await live.client.result(run_id)
            url = f"/api/runs/{run_id}/events"
            everything: list[SseEvent] = []
            await collect(http, url, lambda e: e.event == "end", auth(ALICE), everything)
            tail: list[SseEvent] = []
            await collect(http, url + "?from=3", lambda e: e.event == "end", auth(ALICE), tail)
            last = str(len(durable(everything)) - 1)
            after: list[SseEvent] = []
            headers = {**auth(ALICE), "Last-Event-ID": last}
            await collect(http, url, lambda e: e.event == "end", headers, after)
            bad = await http.get(url, headers={**auth(ALICE), "Last-Event-ID": "x"})
    assert durable(tail) == durable(everything)[3:]
    assert [e.event for e in after] == ["end"]
    assert after[0].data["next"] == len(durable(everything))
    assert bad.status_code == 422
