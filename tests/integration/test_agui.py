"""AG-UI on `capstan serve`, as an outside client sees it: @ag-ui/client's HttpAgent (node, which
checks every stream's order itself) and raw SSE over httpx, against the app on a real socket with
a worker whose model is the scripted fake.

Covered: a run's events (steps, streamed text, tool calls and their results, the answer) in an
order the client accepts; an ending without an answer as RUN_ERROR; an approval and a question as
interrupts that the next request answers; a dropped connection resumed from the client's messages
and from Last-Event-ID, losing and repeating nothing (the user message reaches the model once);
tokens, scopes and tenants; bad input answered before the stream starts.

The client is installed, pinned (tests/agui_client/package-lock.json), into `.capstan/agui-client`
the first time (npm registry); without npm or node the client tests skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import ROOT as REPO
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import (
    ALICE,
    MALLORY,
    READER,
    SseEvent,
    app_for,
    auth,
    read_sse,
    served,
)

pytestmark = [pytest.mark.server, pytest.mark.slow]

CLIENT_SOURCE = REPO / "tests" / "agui_client"
CLIENT_DIR = REPO / ".capstan" / "agui-client"
STREAMED = "Thinking about the listing, one token at a time. " * 4
AGENTS = """\
[helper]
system_prompt = "You help."
tuning = { model_initial_retry = 0.1, model_max_retry = 0.2, model_max_attempts = 2 }

[brief]
max_steps = 1
tuning = { model_initial_retry = 0.1, model_max_retry = 0.2, model_max_attempts = 2 }
"""


def client_script() -> Path:
    """The client, installed from its lock file when it changed (skips without npm or node)."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("npm and node are not installed (apt-get install npm)")
    CLIENT_DIR.mkdir(parents=True, exist_ok=True)
    stale = False
    for name in ("package.json", "package-lock.json"):
        wanted = (CLIENT_SOURCE / name).read_text()
        target = CLIENT_DIR / name
        if not target.exists() or target.read_text() != wanted:
            target.write_text(wanted)
            stale = True
    if stale or not (CLIENT_DIR / "node_modules" / "@ag-ui" / "client").exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=CLIENT_DIR,
            check=True,
            timeout=300,
        )
    script = CLIENT_DIR / "agui_run.mjs"
    script.write_text((CLIENT_SOURCE / "agui_run.mjs").read_text())
    return script


@dataclass
class ClientLog:
    """What the client printed: events and ending per run, and its messages at the end."""

    events: list[list[dict[str, Any]]]
    ends: list[dict[str, Any]]
    messages: list[dict[str, Any]]

    def types(self, run: int) -> list[str]:
        return [e["type"] for e in self.events[run]]


async def run_client(
    url: str, thread: str, runs: list[dict[str, Any]], token: str = ALICE
) -> ClientLog:
    script = await asyncio.to_thread(client_script)  # the first time, an npm install
    plan = {"url": url, "token": token, "threadId": thread, "runs": runs}
    process = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        str(script),
        cwd=CLIENT_DIR,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(json.dumps(plan).encode()), 60)
    assert process.returncode == 0, err.decode()
    log = ClientLog([[] for _ in runs], [{} for _ in runs], [])
    for line in out.decode().splitlines():
        item = json.loads(line)
        if "event" in item:
            log.events[item["run"]].append(item["event"])
        elif "end" in item:
            log.ends[item["run"]] = item["end"]
        else:
            log.messages = item["messages"]
    return log


@contextlib.asynccontextmanager
async def agui(
    agent: Agent, script: list[Any] | FakeProvider, tmp_path: Path
) -> AsyncIterator[tuple[str, Any]]:
    """The app on a socket with the `helper` agent defined, and the live worker."""
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS)
    agent.configure(agents_file=agents)
    async with agent.serving(script) as live, served(app_for(live.client)) as base:
        yield base, live


def thread_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def by_role(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in messages]


async def test_a_run_streams_its_steps_text_and_tool_calls(agent: Agent, tmp_path: Path) -> None:
    script = [
        say("Let me look.", call("list_dir")),
        say(call("finish", answer="All done."), content=STREAMED, chunk_delay=0.08),
    ]
    thread = thread_id()
    async with agui(agent, script, tmp_path) as (base, _):
        log = await run_client(f"{base}/agui/helper", thread, [{"message": "list the files"}])
    end = log.ends[0]
    assert end["error"] is None and end["result"] == "All done."
    types = log.types(0)
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    steps = [(e["type"], e["stepName"]) for e in log.events[0] if e["type"].startswith("STEP_")]
    assert steps == [
        ("STEP_STARTED", "step 1"),
        ("STEP_FINISHED", "step 1"),
        ("STEP_STARTED", "step 2"),
        ("STEP_FINISHED", "step 2"),
    ]
    started = {e["toolCallName"]: e for e in log.events[0] if e["type"] == "TOOL_CALL_START"}
    assert set(started) == {"list_dir", "finish"}
    results = {e["toolCallId"]: e for e in log.events[0] if e["type"] == "TOOL_CALL_RESULT"}
    assert set(results) == {e["toolCallId"] for e in started.values()}
    # the second reply streamed in while the model call was in flight
    second = started["finish"]["parentMessageId"]
    chunks = [e["delta"] for e in log.events[0] if e.get("messageId") == second and "delta" in e]
    assert len(chunks) > 2 and "".join(chunks) == STREAMED
    messages = log.messages
    assert by_role(messages)[0] == ("user", "list the files")
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert [m.get("content") for m in assistant] == ["Let me look.", STREAMED, "All done."]
    assert [c["function"]["name"] for c in assistant[0]["toolCalls"]] == ["list_dir"]
    assert json.loads(assistant[1]["toolCalls"][0]["function"]["arguments"]) == {
        "answer": "All done."
    }
    tools = [m for m in messages if m["role"] == "tool"]
    assert len(tools) == 2 and "finish" not in tools[0]["content"]
    assert tools[1]["content"] == "The run ended (completed) with this call."


async def test_a_question_and_an_approval_are_interrupts(agent: Agent, tmp_path: Path) -> None:
    script = [
        say(call("ask_user", question="Which file?", options=["a.txt", "b.txt"])),
        say(call("write_file", path="a.txt", content="hello")),
        say(call("finish", answer="wrote a.txt")),
    ]
    thread = thread_id()
    async with agui(agent, script, tmp_path) as (base, live):
        log = await run_client(
            f"{base}/agui/helper",
            thread,
            [{"message": "write a file"}, {"resume": "approve"}, {"resume": "approve"}],
        )
        run_id = log.events[0][0]["metadata"]["capstan"]["run_id"]
        result = await live.client.result(run_id)
    assert [end["error"] for end in log.ends] == [None, None, None]
    asked, approval = (log.events[n][-1]["outcome"] for n in (0, 1))
    assert asked["type"] == approval["type"] == "interrupt"
    (question,) = asked["interrupts"]
    assert question["reason"] == "question" and question["message"] == "Which file?"
    (request,) = approval["interrupts"]
    assert request["reason"] == "tool_approval"
    assert request["metadata"]["capstan"]["tool"] == "write_file"
    calls = {
        e["toolCallName"]: e["toolCallId"] for e in log.events[1] if e["type"] == "TOOL_CALL_START"
    }
    assert request["toolCallId"] == calls["write_file"]
    assert log.ends[1]["pendingInterrupts"][0]["id"] == request["id"]
    # each answer continues the stream: the step re-opened, the call's result, on to the end
    resumed = log.events[2]
    assert [e["type"] for e in resumed[:2]] == ["RUN_STARTED", "STEP_STARTED"]
    (done,) = [
        e
        for e in resumed
        if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == request["toolCallId"]
    ]
    assert "a.txt" in done["content"]
    answer = [
        m for m in log.messages if m["role"] == "tool" and m["toolCallId"] == question["toolCallId"]
    ]
    assert [m["content"] for m in answer] == ["yes"]
    assert log.ends[2]["result"] == "wrote a.txt" and log.ends[2]["pendingInterrupts"] == []
    assert result.output == "wrote a.txt"


async def test_a_dropped_connection_resumes_from_the_clients_messages(
    agent: Agent, tmp_path: Path
) -> None:
    script = [
        say("Let me look.", call("list_dir")),
        say(call("finish", answer="ok"), content=STREAMED, chunk_delay=0.08),
    ]
    thread = thread_id()
    async with agui(agent, script, tmp_path) as (base, _):
        log = await run_client(
            f"{base}/agui/helper",
            thread,
            [
                # the second content event is the first streamed piece of step 2's reply
                {"message": "list", "abortAfter": {"type": "TEXT_MESSAGE_CONTENT", "count": 2}},
                {},  # the same thread again, with what the client has
            ],
        )
    assert log.ends[0]["aborted"] and log.ends[1]["error"] is None
    assert log.ends[1]["result"] == "ok"
    first, second = log.events
    assert any(e.get("delta") == "Let me look." for e in first)
    # the second response re-opens step 2 and its reply, then goes on: nothing of step 1 again
    assert [e["type"] for e in second[:3]] == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START"]
    assert second[1]["stepName"] == "step 2"
    assert not any(e.get("delta") == "Let me look." for e in second)
    assert sum(e["type"] == "TOOL_CALL_RESULT" for e in first + second) == 2
    assistant = [m for m in log.messages if m["role"] == "assistant"]
    assert [m.get("content") for m in assistant] == ["Let me look.", STREAMED, "ok"]
    assert [m["role"] for m in log.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_a_run_that_ends_without_an_answer_ends_in_run_error(
    agent: Agent, tmp_path: Path
) -> None:
    script = [say("Looking.", call("list_dir")), say(call("finish", answer="never"))]
    async with agui(agent, script, tmp_path) as (base, _):
        log = await run_client(f"{base}/agui/brief", thread_id(), [{"message": "look"}])
    assert log.ends[0]["error"] is None  # an ending the client takes as it is
    last = log.events[0][-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "max_steps"
    assert last["message"].startswith("the run ended (max_steps)") and "\n" not in last["message"]
    types = log.types(0)
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED") == 1
    assert "TOOL_CALL_RESULT" in types


def body(thread: str, *messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": uuid.uuid4().hex, "messages": list(messages), **fields}


def user(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or uuid.uuid4().hex, "role": "user", "content": text}


async def collect(
    http: httpx.AsyncClient,
    url: str,
    json_body: dict[str, Any],
    headers: dict[str, str],
    until: Any = None,
) -> list[SseEvent]:
    out: list[SseEvent] = []
    async with http.stream("POST", url, json=json_body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for event in read_sse(response):
            out.append(event)
            if until is not None and until(event):
                break
    return out


def position(event: SseEvent) -> tuple[int, int]:
    assert event.id is not None
    parts = event.id.split(".")
    return int(parts[1]), int(parts[2]) if len(parts) == 3 else 0


async def test_last_event_id_resumes_exactly(agent: Agent, tmp_path: Path) -> None:
    """Raw SSE: ids grow, a reconnect with Last-Event-ID and the same body (the same user
    message) gets exactly the rest, and the message reaches the model once (a message
    delivered twice would be in the third model request twice)."""
    script = [
        say("Let me look.", call("list_dir")),
        say(call("list_dir"), content=STREAMED, chunk_delay=0.08),
        say(call("finish", answer="ok")),
    ]
    thread, url = thread_id(), "/agui/helper"
    request = body(thread, user("list it"))
    async with (
        agui(agent, script, tmp_path) as (base, live),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        first = await collect(
            http, url, request, auth(ALICE), lambda e: e.id is not None and e.id.count(".") == 2
        )
        last = next(e.id for e in reversed(first) if e.id)
        assert last is not None
        headers = {**auth(ALICE), "Last-Event-ID": last}
        second = await collect(http, url, request, headers)
        replay = await collect(http, url, body(thread), auth(ALICE))
        requests = live.fake.requests
    assert second[0].data["type"] == "RUN_STARTED" and second[-1].data["type"] == "RUN_FINISHED"
    got = [e for e in first + second if e.id]
    assert [position(e) for e in got] == sorted({position(e) for e in got})  # nothing twice
    durable = {position(e)[0]: e.data for e in replay if e.id}
    assert [position(e)[0] for e in replay if e.id] == sorted(durable)  # one event a position
    resumed = {position(e)[0]: e.data for e in got if position(e)[1] == 0}
    message = next(e.data["messageId"] for e in first if e.id == last)
    for n, event in durable.items():  # every durable event, once, the streamed reply completed
        if event.get("messageId") == message and event["type"] == "TEXT_MESSAGE_CONTENT":
            text = "".join(
                e.data["delta"]
                for e in got
                if e.data.get("messageId") == message and "delta" in e.data
            )
            assert text == event["delta"] == STREAMED
        else:
            assert resumed[n] == event, n
    assert len(requests) == 3
    for sent in requests:
        said = [m for m in sent["messages"] if m["role"] == "user" and "list it" in str(m)]
        assert len(said) == 1, sent["messages"]


async def test_tokens_tenants_and_bad_input(agent: Agent, tmp_path: Path) -> None:
    script = [say(call("write_file", path="a.txt", content="hi")), say(call("finish", answer="ok"))]
    thread, url = thread_id(), "/agui"  # the plain route: the thread's spec, else the defaults
    async with (
        agui(agent, script, tmp_path) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        events = await collect(http, url, body(thread, user("write")), auth(ALICE))
        (interrupt,) = events[-1].data["outcome"]["interrupts"]

        async def post(payload: Any, token: str | None = ALICE, path: str = url) -> httpx.Response:
            headers = auth(token) if token else {}
            if isinstance(payload, bytes):
                return await http.post(path, content=payload, headers=headers)
            return await http.post(path, json=payload, headers=headers)

        answer = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"action": "approve"},
        }
        no_token = await post(body(thread), None)
        reader = await post(body(thread), READER)
        mallory = await post(body(thread), MALLORY)
        mallory_answer = await post(body(thread, resume=[answer]), MALLORY)
        not_json = await post(b"{not json")
        no_thread = await post({"runId": "r", "messages": []})
        bad_message = await post(body(thread, {"id": "m", "role": "wizard", "content": "x"}))
        image = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
        not_text = await post(body(thread, {"id": "m", "role": "user", "content": [image]}))
        unknown_agent = await post(body(thread), path="/agui/nobody")
        stale = await post(body(thread, resume=[{**answer, "interruptId": f"{interrupt['id']}x"}]))
        bad_answer = await post(body(thread, resume=[{**answer, "payload": {"action": "maybe"}}]))
        twice = await post(body(thread, resume=[answer, answer]))
        flood = await post(
            body(thread, resume=[{**answer, "interruptId": f"i{n}"} for n in range(65)])
        )
        # the request id alone (as a later run of the thread may reuse it) is not the interrupt
        bare_id = await post(
            body(thread, resume=[{**answer, "interruptId": interrupt["id"].split("#")[0]}])
        )
        deep = await post(b"[" * 100_000)
        unknown_thread = await post(body(thread_id()))
        wrong_id = await http.post(
            url, json=body(thread), headers={**auth(ALICE), "Last-Event-ID": "x"}
        )
        approving = body(thread, resume=[answer])
        approved = await collect(http, url, approving, auth(ALICE))
        again = await collect(http, url, approving, auth(ALICE))  # sent twice: decided once
        late = await post(body(thread, resume=[answer]))  # another request: not open any more
    assert no_token.status_code == 401 and no_token.json()["error"]["code"] == "unauthorized"
    assert reader.status_code == 403
    assert mallory.status_code == 404 and mallory_answer.status_code == 404
    # another tenant's thread is an unknown one: the same answer as for a thread never used
    assert mallory.json()["error"] == {
        "code": "run_not_found",
        "message": f"no run {thread!r}",
        "field": None,
    }
    for response, field in (
        (not_json, "body"),
        (no_thread, "body.threadId"),
        (bad_message, "body.messages.0"),
        (not_text, "body.messages.0.content"),
        (unknown_agent, "path.agent"),
        (bad_answer, "body.resume.0.payload"),
        (twice, "body.resume.1.interruptId"),
        (flood, "body.resume"),
        (deep, "body"),
        (wrong_id, "header.last-event-id"),
    ):
        assert response.status_code == 422, (field, response.text)
        error = response.json()["error"]
        assert error["field"].startswith(field) and "\n" not in error["message"], error
    assert "nobody" in unknown_agent.json()["error"]["message"]
    assert stale.status_code == 409 and "no open request" in stale.json()["error"]["message"]
    assert bare_id.status_code == 409
    assert unknown_thread.status_code == 404
    assert approved[-1].data["outcome"] == {"type": "success"}
    assert again[-1].data["outcome"] == {"type": "success"}
    assert late.status_code == 409


async def test_a_message_taken_mid_run_is_not_sent_again_by_a_resend(
    agent: Agent, tmp_path: Path
) -> None:
    """A run continues as new before each wait for a person, so a message sent while it waited
    lands in a middle execution of its chain. A client that sends that request again after the
    run ended re-attaches to it: the message does not start the thread's next run."""
    script = [
        say(call("write_file", path="a.txt", content="a")),
        say(call("write_file", path="b.txt", content="b")),
        say(call("finish", answer="both written")),
    ]
    thread, url = thread_id(), "/agui"
    first, second = user("write two files", "u1"), user("and keep them short", "u2")
    async with (
        agui(agent, script, tmp_path) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):

        def interrupts(events: list[SseEvent]) -> list[dict[str, Any]]:
            return list(events[-1].data["outcome"]["interrupts"])

        async def approve(events: list[SseEvent]) -> list[SseEvent]:
            resume = [
                {"interruptId": i["id"], "status": "resolved", "payload": {"action": "approve"}}
                for i in interrupts(events)
            ]
            # as a client whose last message is not a new user message: nothing new to deliver
            return await collect(http, url, body(thread, resume=resume), auth(ALICE))

        waiting = await collect(http, url, body(thread, first), auth(ALICE))
        # sent while the run waits: delivered to the execution that waits (a middle one)
        still = await collect(http, url, body(thread, first, second), auth(ALICE))
        again = await approve(still)  # the second write waits: the run continues as new again
        done = await approve(again)
        resent = await collect(http, url, body(thread, first, second), auth(ALICE))
        runs = await http.get(f"/api/threads/{thread}", headers=auth(ALICE))
    assert interrupts(waiting) and interrupts(still) and interrupts(again)
    assert done[-1].data["outcome"] == {"type": "success"}
    assert resent[-1].data["outcome"] == {"type": "success"}  # the same run, ended
    assert len(runs.json()) == 1, runs.json()  # no second run of the thread
