"""`capstan serve` as an A2A server, called as another agent would: a2a-sdk's own client (card
resolver, client factory, JSON-RPC transport) over a real socket, on real runs (dev server,
scripted fake model, in-process worker). Raw JSON-RPC for what a well-behaved client never
sends: bad tokens, scopes, malformed calls.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format, struct_pb2

from capstan.api.app import create_app
from capstan.api.auth import Principal, Scope, TokenStore, digest
from capstan.client.runs import CapstanClient
from capstan.core.tenants import workspace_key, workspace_subdir
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import Reply, call, say
from tests.integration import outside
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import (
    ALICE,
    MALLORY,
    READER,
    TOKENS,
    auth,
    read_sse,
    served,
)

pytestmark = pytest.mark.server

AGENTS = """
[helper]
system_prompt = "You look after the files of a workspace.\\n\\nAnswer briefly."
allowed_tools = ["read_file", "write_file", "ask_user", "finish"]
max_steps = 6
delegates = ["writer"]

[writer]
system_prompt = "You write files."
allowed_tools = ["write_file", "finish"]
max_steps = 4
"""
#: acme tokens with one of the two writing scopes
STEERER = "steerer-token-0123456789"
APPROVER = "approver-token-0123456789"
PRINCIPALS = {
    **{
        digest(token): principal
        for token in (ALICE, READER, MALLORY)
        if (principal := TOKENS.find(token))
    },
    digest(STEERER): Principal(
        identity="steerer@acme", tenant="acme", scopes=frozenset({Scope.READ, Scope.STEER})
    ),
    digest(APPROVER): Principal(
        identity="approver@acme", tenant="acme", scopes=frozenset({Scope.READ, Scope.APPROVE})
    ),
}
V1 = {"A2A-Version": "1.0"}


def script(step: int, messages: list[dict[str, Any]]) -> Reply:
    """The task is the last user message: WRITE <file> writes it (approval), ASK asks a
    question, DELEGATE <file> has the writer write it, RECALL answers with every task of the
    conversation, SLOW takes a while; the answer names the task and what its tool said."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    task = str(messages[last]["content"])
    said = [str(m.get("content")) for m in messages[last + 1 :] if m["role"] == "tool"]
    if said:
        return say(call("finish", answer=f"{task}: {said[-1]}"))
    if task.startswith("WRITE"):
        return say(call("write_file", path=task.split()[1], content=f"written by {task}"))
    if task.startswith("DELEGATE"):
        return say(call("delegate", agent="writer", task=f"WRITE {task.split()[1]}"))
    if task.startswith("ASK"):
        return say(call("ask_user", question="Which colour?", options=["blue", "red"]))
    if task.startswith("RECALL"):
        tasks = [str(m["content"]) for m in messages if m["role"] == "user"]
        return say(call("finish", answer=" | ".join(tasks)))
    if task.startswith("SLOW"):
        return say(call("finish", answer="slowly"), hold=2.0)
    return say(call("finish", answer=f"done: {task}"))


@contextlib.asynccontextmanager
async def a2a_server(agent: Agent, tmp_path: Path) -> AsyncIterator[tuple[str, CapstanClient]]:
    """The app with the `helper` agent on a real socket, a worker on the scripted model; the
    base URL and a client."""
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS)
    agent.configure(agents_file=agents)
    async with agent.serving(script) as live:
        api = ApiSettings(stream_poll_seconds=2.0, live_text_seconds=0.2)
        app = create_app(
            live.client.settings, api, tokens=TokenStore(PRINCIPALS), client=live.client
        )
        async with served(app) as url:
            yield url, live.client


@contextlib.asynccontextmanager
async def a2a_client(
    url: str, token: str, *, streaming: bool = False, polling: bool = False
) -> AsyncIterator[Client]:
    """a2a-sdk's client for `helper`, from its card, with `token` on every request
    (`polling`: a send answers at once, `returnImmediately`)."""
    async with httpx.AsyncClient(headers=auth(token), timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
        factory = ClientFactory(config)
        client = await factory.create_from_url(f"{url}/a2a/helper/")
        async with client:
            yield client


def message(
    text: str = "", *, task: Task | None = None, context: str = "", data: Any = None
) -> SendMessageRequest:
    parts = [Part(text=text)] if text else []
    if data is not None:
        value = struct_pb2.Value()
        json_format.ParseDict(data, value)
        parts.append(Part(data=value))
    return SendMessageRequest(
        message=Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=parts,
            task_id=task.id if task is not None else "",
            context_id=context or (task.context_id if task is not None else ""),
        )
    )


async def events(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


async def send(client: Client, request: SendMessageRequest) -> Task:
    """A blocking (non-streaming) send: the one task it answers with."""
    (response,) = await events(client, request)
    assert response.HasField("task"), response
    return response.task


def answer(task: Task) -> str:
    (artifact,) = task.artifacts
    (part,) = artifact.parts
    return part.text


def asked(task: Task) -> dict[str, Any]:
    """The requests an `input-required` task lists (its status message's data part)."""
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task.status
    (text, data) = task.status.message.parts
    assert text.text
    listed: dict[str, Any] = json_format.MessageToDict(data.data)
    return listed


async def test_card_and_tasks_of_one_context(agent: Agent, tmp_path: Path) -> None:
    """The card says who the agent is and how to call it; a message starts a run that
    completes with its answer as an artifact; the next message of the context is a new task
    that goes on from the first one's conversation; both tasks stay readable."""
    async with (
        a2a_server(agent, tmp_path) as (url, capstan),
        httpx.AsyncClient(headers=auth(ALICE)) as http,
    ):
        card = await A2ACardResolver(http, f"{url}/a2a/helper/").get_agent_card()
        async with a2a_client(url, ALICE) as client:
            first = await send(client, message("HELLO there"))
            second = await send(client, message("RECALL", context=first.context_id))
            again = await client.get_task(GetTaskRequest(id=first.id))
        run = await http.get(f"{url}/api/runs/{first.id.split('~')[0]}")
    assert card.name == "helper"
    assert card.description == "You look after the files of a workspace."
    (skill,) = card.skills
    assert skill.id == "helper" and {"write_file", "ask_user"} <= set(skill.tags)
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
    assert {i.url for i in card.supported_interfaces} == {f"{url}/a2a/helper/"}

    assert first.status.state == TaskState.TASK_STATE_COMPLETED, first.status
    assert answer(first) == "done: HELLO there"
    assert first.id.startswith(f"thread-acme:{first.context_id}~")
    assert second.status.state == TaskState.TASK_STATE_COMPLETED, second.status
    assert second.context_id == first.context_id and second.id != first.id
    assert answer(second) == "HELLO there | RECALL"  # the context's conversation went on
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(again) == "done: HELLO there"  # the earlier run of the thread, still itself
    assert run.status_code == 200 and run.json()["terminal_reason"] == "completed"
    assert await capstan.is_running(first.id.split("~")[0]) is False


async def test_approval_is_input_required_then_approved_or_denied(
    agent: Agent, tmp_path: Path
) -> None:
    """A run that waits for approval is `input-required`; the next message to the task is the
    decision (in words, or a data part), in the token's name; a decision needs `approve`."""
    async with a2a_server(agent, tmp_path) as (url, _), a2a_client(url, ALICE) as client:
        waiting = await send(client, message("WRITE a.txt"))
        (request,) = asked(waiting)["approvals"]
        with pytest.raises(InvalidParamsError, match="no open approval request 'nope'"):
            await send(
                client, message(task=waiting, data={"decision": "approve", "request_id": "nope"})
            )
        with pytest.raises(InvalidParamsError, match="reply 'approve'"):
            await send(client, message("perhaps", task=waiting))
        async with a2a_client(url, STEERER) as steerer:
            with pytest.raises(InvalidRequestError, match="'approve' scope"):
                await send(steerer, message("approve", task=waiting))
        approved = await send(client, message("approve", task=waiting))
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            await send(client, message("and more", task=approved))

        denied_first = await send(client, message("WRITE b.txt"))
        async with a2a_client(url, APPROVER) as approver:  # `approve` alone decides
            denied = await send(approver, message("deny: not today", task=denied_first))
        async with httpx.AsyncClient(headers=auth(ALICE)) as http:
            trail = await http.get(f"{url}/api/runs/{approved.id.split('~')[0]}/audit")
    workspace = agent.settings.workspace_dir / workspace_subdir(
        workspace_key("acme", approved.context_id)
    )
    assert request["tool"] == "write_file" and request["args_hash"]
    assert approved.status.state == TaskState.TASK_STATE_COMPLETED, approved.status
    assert (workspace / "a.txt").read_text() == "written by WRITE a.txt"
    assert denied.status.state == TaskState.TASK_STATE_COMPLETED, denied.status
    assert "not today" in answer(denied)
    assert not (
        agent.settings.workspace_dir
        / workspace_subdir(workspace_key("acme", denied.context_id))
        / "b.txt"
    ).exists()
    records = [json.loads(line) for line in trail.text.splitlines()]
    decisions = [r for r in records if r.get("kind") == "decision"]
    assert [d.get("identity") for d in decisions] == ["alice@acme"], decisions


async def test_a_delegated_childs_request_is_the_tasks(agent: Agent, tmp_path: Path) -> None:
    """A run waiting on its child's approval is `input-required` with the child's request;
    the decision sent to the task reaches the child."""
    async with a2a_server(agent, tmp_path) as (url, _), a2a_client(url, ALICE) as client:
        waiting = await send(client, message("DELEGATE e.txt"))
        (request,) = asked(waiting)["approvals"]
        done = await send(client, message("approve", task=waiting))
    run_id = waiting.id.split("~")[0]
    assert request["request_id"].startswith(f"{run_id}/writer-")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
    assert answer(done).startswith("DELEGATE e.txt: ")
    workspace = agent.settings.workspace_dir / workspace_subdir(
        workspace_key("acme", done.context_id)
    )
    assert (workspace / "e.txt").read_text() == "written by WRITE e.txt"


async def test_streams_follow_a_task_to_input_required_and_to_completed(
    agent: Agent, tmp_path: Path
) -> None:
    """A stream sends the task, a `working` status per step of the run, then `input-required`;
    the decision's stream goes on to the output artifact and `completed`."""
    async with (
        a2a_server(agent, tmp_path) as (url, _),
        a2a_client(url, ALICE, streaming=True) as client,
    ):
        opened = await events(client, message("WRITE c.txt"))
        task = opened[0].task
        decision = {"decision": "approve", "reason": "fine"}
        finished = await events(client, message(task=task, data=decision))
    assert opened[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    steps = [e.status_update for e in opened[1:-1]]
    assert steps and {s.status.state for s in steps} == {TaskState.TASK_STATE_WORKING}
    said = [s.status.message.parts[0].text for s in steps]
    assert any("write_file" in text for text in said), said  # the step that asked is sent
    assert opened[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert finished[0].task.status.state == TaskState.TASK_STATE_WORKING  # decided: not asked
    kinds = [e.WhichOneof("payload") for e in finished]
    assert kinds[-2:] == ["artifact_update", "status_update"], kinds
    assert finished[-2].artifact_update.artifact.parts[0].text.startswith("WRITE c.txt: ")
    assert finished[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    progress = [e.status_update.metadata["capstan_event"]["kind"] for e in finished[1:-2]]
    assert "tool_finished" in progress, progress


async def test_get_answer_subscribe_and_cancel_within_a_tenant(
    agent: Agent, tmp_path: Path
) -> None:
    """A question is answered with the next message; a subscription sends the task as it
    is; a cancelled task is `canceled` and cannot be cancelled twice; another tenant's task is
    an unknown one, whatever the method."""
    async with (
        a2a_server(agent, tmp_path) as (url, _),
        a2a_client(url, ALICE) as client,
        a2a_client(url, MALLORY) as mallory,
        a2a_client(url, ALICE, streaming=True) as streaming,
    ):
        question = await send(client, message("ASK the colour"))
        (asking,) = asked(question)["questions"]
        answered = await send(client, message("blue", task=question))
        waiting = await send(client, message("ASK again"))
        seen = await client.get_task(GetTaskRequest(id=waiting.id))
        subscribed = [e async for e in streaming.subscribe(SubscribeToTaskRequest(id=waiting.id))]
        for call_other in (
            mallory.get_task(GetTaskRequest(id=waiting.id)),
            mallory.cancel_task(CancelTaskRequest(id=waiting.id)),
            send(mallory, message("red", task=waiting)),
            client.get_task(GetTaskRequest(id="run-that-never-was")),
            client.get_task(GetTaskRequest(id=f"{waiting.id}0")),
        ):
            with pytest.raises(TaskNotFoundError):
                await call_other
        cancelled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=waiting.id))
    assert asking["question"] == "Which colour?" and asking["options"] == ["blue", "red"]
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(answered) == "ASK the colour: blue"
    assert asked(seen)["questions"][0]["question"] == "Which colour?"
    (only,) = subscribed  # the task waits for input: the stream is the task, and ends
    assert only.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled.status


async def test_a_working_task_takes_live_messages(agent: Agent, tmp_path: Path) -> None:
    """`returnImmediately` answers with the task `working`; a message to a working task is a
    live message for its model, recorded in the sender's name."""
    async with (
        a2a_server(agent, tmp_path) as (url, _),
        a2a_client(url, ALICE, polling=True) as polling,
        a2a_client(url, ALICE) as client,
    ):
        started = await send(polling, message("SLOW work"))
        sent = await send(client, message("PS: the report is due", task=started))
        async with httpx.AsyncClient(headers=auth(ALICE)) as http:
            trail = await http.get(f"{url}/api/runs/{started.id.split('~')[0]}/audit")
    assert started.status.state == TaskState.TASK_STATE_WORKING, started.status
    assert sent.id == started.id
    assert sent.status.state == TaskState.TASK_STATE_COMPLETED and answer(sent) == "slowly"
    records = [json.loads(line) for line in trail.text.splitlines()]
    messages = [r for r in records if r.get("kind") == "send_message"]
    assert [(m["text"], m["identity"]) for m in messages] == [
        ("SLOW work", "alice@acme"),  # the task, the start signal of the thread's run
        ("PS: the report is due", "alice@acme"),
    ], messages


async def test_tokens_scopes_and_agents_at_the_http_layer(agent: Agent, tmp_path: Path) -> None:
    """No token or a bad one: 401 with `WWW-Authenticate`; a method beyond the token's scopes:
    403; an unknown agent: 404; all in the API's JSON shape."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
    async with a2a_server(agent, tmp_path) as (url, _), httpx.AsyncClient(base_url=url) as http:
        card = "/a2a/helper/.well-known/agent-card.json"
        answers = {
            "card, no token": await http.get(card),
            "card, bad token": await http.get(card, headers=auth("not-a-token-at-all")),
            "call, no token": await http.post("/a2a/helper/", json=body, headers=V1),
            "call, bad token": await http.post(
                "/a2a/helper/", json=body, headers={**V1, **auth("not-a-token-at-all")}
            ),
        }
        reader_send = await http.post("/a2a/helper/", json=body, headers={**V1, **auth(READER)})
        cancel = {**body, "method": "CancelTask", "params": {"id": "x"}}
        approver_cancel = await http.post(
            "/a2a/helper/", json=cancel, headers={**V1, **auth(APPROVER)}
        )
        reader_get = await http.post(
            "/a2a/helper/",
            json={**body, "method": "GetTask", "params": {"id": "run-x"}},
            headers={**V1, **auth(READER)},
        )
        unknown = [
            await http.get("/a2a/nobody/.well-known/agent-card.json", headers=auth(ALICE)),
            await http.post("/a2a/nobody/", json=body, headers={**V1, **auth(ALICE)}),
        ]
    for name, answer_ in answers.items():
        assert answer_.status_code == 401, name
        assert answer_.headers["www-authenticate"] == "Bearer", name
        assert answer_.json()["error"]["code"] == "unauthorized", name
    assert reader_send.status_code == 403 and "'steer' scope" in reader_send.text
    assert approver_cancel.status_code == 403 and "'steer' scope" in approver_cancel.text
    assert reader_get.status_code == 200 and reader_get.json()["error"]["code"] == -32001
    for refused in unknown:
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"] == {
            "code": "agent_not_found",
            "message": "no agent 'nobody' on this server",
            "field": None,
        }


def _file_part_message() -> dict[str, Any]:
    return {
        "message": {
            "messageId": "m-file",
            "role": "ROLE_USER",
            "parts": [{"url": "https://example.com/a.pdf", "mediaType": "application/pdf"}],
        }
    }


MALFORMED: list[tuple[str, bytes | dict[str, Any], int]] = [
    ("not JSON", b"{not json", -32700),
    ("a batch", b"[]", -32600),
    ("not JSON-RPC 2.0", {"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, -32600),
    ("no method", {"jsonrpc": "2.0", "id": 1}, -32600),
    ("unknown method", {"jsonrpc": "2.0", "id": 1, "method": "tasks/explode"}, -32601),
    ("no message", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}, -32602),
    (
        "message of the wrong type",
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 5}},
        -32602,
    ),
    (
        "a file part",
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": _file_part_message()},
        -32005,
    ),
    (
        "negative history",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "GetTask",
            "params": {"id": "x", "historyLength": -1},
        },
        -32602,
    ),
    (
        "unknown task",
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no"}},
        -32001,
    ),
    (
        "another tenant's thread",
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "thread-other:x~abc"}},
        -32001,
    ),
    (
        "push notifications",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": "x", "url": "https://example.com/hook"},
        },
        -32003,
    ),
    ("listing", {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}, -32004),
    ("0.3 names, bad params", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}, -32600),
    # a 0.3 name sent with `A2A-Version: 1.0` (the SDK's 0.3 adapter said -32603)
    ("0.3 name, 1.0 header", {"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}, -32600),
]


async def test_malformed_calls_get_json_rpc_errors(agent: Agent, tmp_path: Path) -> None:
    """Every malformed call is answered with the protocol's JSON-RPC error: status 200, the
    code, a one-line message; never a 5xx or a traceback."""
    async with a2a_server(agent, tmp_path) as (url, _), httpx.AsyncClient(base_url=url) as http:
        headers = {**V1, **auth(ALICE), "Content-Type": "application/json"}
        answers = {}
        for name, body, _ in MALFORMED:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            answers[name] = await http.post("/a2a/helper/", content=raw, headers=headers)
        unversioned = await http.post(
            "/a2a/helper/",
            json={"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "x"}},
            headers=auth(ALICE),
        )
    for name, _, code in MALFORMED:
        got = answers[name]
        assert got.status_code == 200, (name, got.text)
        error = got.json()["error"]
        assert error["code"] == code, (name, got.text)
        assert "Traceback" not in got.text and "\n" not in error["message"], name
    assert unversioned.json()["error"]["code"] == -32009  # 1.0 names need `A2A-Version: 1.0`


def _message_03(method: str, *parts: dict[str, Any], task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": list(parts),
    }
    if task_id is not None:
        message["taskId"] = task_id
    return {"jsonrpc": "2.0", "id": method, "method": method, "params": {"message": message}}


async def test_0_3_method_names_run_a_task(agent: Agent, tmp_path: Path) -> None:
    """A 0.3 client's `message/send`, `message/stream` and `tasks/get`, at the same URL: the
    stream ends at `input-required`, a 0.3 data part decides."""
    async with (
        a2a_server(agent, tmp_path) as (url, _),
        httpx.AsyncClient(base_url=url, headers=auth(ALICE), timeout=60) as http,
    ):
        hello = {"kind": "text", "text": "HELLO old friend"}
        sent = (await http.post("/a2a/helper/", json=_message_03("message/send", hello))).json()
        get_03 = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tasks/get",
            "params": {"id": sent["result"]["id"]},
        }
        got = (await http.post("/a2a/helper/", json=get_03)).json()["result"]
        write = _message_03("message/stream", {"kind": "text", "text": "WRITE d.txt"})
        async with http.stream("POST", "/a2a/helper/", json=write) as streamed:
            stream = [event.data["result"] async for event in read_sse(streamed)]
        approve = {"kind": "data", "data": {"decision": "approve"}}
        decide = _message_03("message/send", approve, task_id=stream[0]["id"])
        decided = (await http.post("/a2a/helper/", json=decide)).json()["result"]
    result = sent["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "completed", sent
    assert result["artifacts"][0]["parts"][0]["text"] == "done: HELLO old friend"
    assert got["id"] == result["id"] and got["status"]["state"] == "completed"
    assert stream[0]["kind"] == "task" and stream[0]["status"]["state"] == "submitted"
    assert stream[-1]["kind"] == "status-update"
    assert stream[-1]["status"]["state"] == "input-required"
    assert decided["status"]["state"] == "completed", decided


@pytest.fixture
def serve_process(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`capstan serve` as its user starts it, with the agents file and one admin token."""
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS)
    env = {"CAPSTAN_API_TOKEN": ALICE, "CAPSTAN_AGENTS": str(agents)}
    with outside.serve_process(settings, tmp_path / "serve.log", env) as base:
        yield base


@pytest.mark.slow  # starts `capstan serve` as a process
async def test_capstan_serve_serves_its_agents(
    agent: Agent, serve_process: str, tmp_path: Path
) -> None:
    """`capstan serve` with `CAPSTAN_AGENTS`: the agent's card and a task, over the socket a
    user's agent would call."""
    async with agent.serving(script), a2a_client(serve_process, ALICE) as client:
        task = await send(client, message("HELLO from afar"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
    assert answer(task) == "done: HELLO from afar"
