"""The protocol endpoints that the OpenAPI document does not describe (JSON-RPC: MCP at
`/mcp`, A2A at `/a2a/{agent}/`), fuzzed: well-formed and malformed messages, every method
with arbitrary params, every tool with arbitrary arguments, on a real socket. No answer is a
5xx, a JSON-RPC internal error (-32603: an exception nobody turned into the protocol's error)
or a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from capstan.client.runs import CapstanClient
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, MALLORY, READER, app_for, auth, served

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROTOCOL = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream"}
TOOLS = [
    "start_run",
    "run_status",
    "run_result",
    "pending",
    "approve",
    "deny",
    "answer",
    "send_message",
    "review",
    "no_such_tool",
]
ARGUMENTS = ["run_id", "task", "agent", "model", "max_steps", "request_id", "reason", "text"]
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    "no/such/method",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
run_ids = st.sampled_from(["run-x", "", "thread-acme", "../../etc", "r" * 300]) | st.text(
    max_size=30
)
tool_calls = st.fixed_dictionaries(
    {
        "name": st.sampled_from(TOOLS),
        "arguments": st.dictionaries(
            st.sampled_from(ARGUMENTS), st.one_of(run_ids, json_values), max_size=5
        ),
    }
)
messages = st.one_of(
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 10_000),
            "method": st.just("tools/call"),
            "params": tool_calls,
        }
    ),
    st.fixed_dictionaries(
        {
            "jsonrpc": st.sampled_from(["2.0", "1.0", ""]),
            "id": st.one_of(st.integers(), st.text(max_size=8), st.none()),
            "method": st.sampled_from(METHODS) | st.text(max_size=20),
            "params": json_values,
        }
    ),
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 100),
            "method": st.just("resources/read"),
            "params": st.fixed_dictionaries(
                {"uri": st.builds("capstan://runs/{}/audit".format, run_ids) | st.text(max_size=40)}
            ),
        }
    ),
    json_values,
)
tokens = st.sampled_from([ALICE, READER, MALLORY])
RUN_STATUS_X = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "run_status", "arguments": {"run_id": "x"}},
}


def fuzzing(examples: int) -> settings:
    """Hypothesis settings of a fuzz over a live server: no deadline, no example database."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def session(http: httpx.Client, token: str) -> str:
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    opened = http.post("/mcp", json=initialize, headers={**ACCEPT, **auth(token)})
    opened.raise_for_status()
    session_id = opened.headers["mcp-session-id"]
    headers = {**ACCEPT, **auth(token), "mcp-session-id": session_id}
    headers["mcp-protocol-version"] = PROTOCOL
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    http.post("/mcp", json=done, headers=headers).raise_for_status()
    return session_id


def fuzz(base: str, examples: int) -> tuple[list[str], set[str]]:
    """The failures, in words, and the kinds of answer seen (so a fuzzer that never reached
    a tool cannot pass)."""
    failures: list[str] = []
    seen: set[str] = set()
    with httpx.Client(base_url=base, timeout=60) as http:
        sessions = {token: session(http, token) for token in (ALICE, READER, MALLORY)}

        @fuzzing(examples)
        # one of each kind of answer, whatever the draw: a result, a tool error, a protocol error
        @example({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, ALICE, False, PROTOCOL)
        @example(RUN_STATUS_X, ALICE, False, PROTOCOL)
        @example({"jsonrpc": "2.0", "id": 3, "method": "no/such"}, READER, False, PROTOCOL)
        @given(
            message=messages,
            token=tokens,
            raw=st.booleans(),
            version=st.sampled_from([PROTOCOL, "2026-07-28", "1999-01-01", ""]),
        )
        def check(message: Any, token: str, raw: bool, version: str) -> None:
            headers = {**ACCEPT, **auth(token), "mcp-session-id": sessions[token]}
            if version:
                headers["mcp-protocol-version"] = version
            body = json.dumps(message).encode()
            if raw:
                body = body[: max(1, len(body) // 2)]  # cut short: not JSON any more
            answer = http.post(
                "/mcp", content=body, headers={**headers, "Content-Type": "application/json"}
            )
            text = answer.text
            problem = None
            if answer.status_code >= 500:
                problem = f"status {answer.status_code}"
            elif "-32603" in text or "Traceback" in text:
                problem = "an internal error"
            if problem is not None:
                failures.append(f"{problem} for {body[:300]!r}: {text[:500]}")
            if '"isError":true' in text:
                seen.add("tool error")
            elif '"result"' in text:
                seen.add("result")
            if '"error"' in text:
                seen.add("protocol error")

        check()
    return failures, seen


@contextlib.asynccontextmanager
async def idle_api(agent: Agent, queue: str) -> AsyncIterator[str]:
    """The API's base URL, over a client whose runs go to `queue`, which no worker polls:
    runs the fuzzer starts must not run. They are terminated afterwards."""
    async with agent.serving([]) as live:
        idle = CapstanClient(
            live.client.client, agent.settings.model_copy(update={"task_queue": queue})
        )
        async with served(app_for(idle, writes_per_minute=1_000_000)) as base:
            yield base
        query = f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
        async for wf in live.client.client.list_workflows(query):
            await live.client.client.get_workflow_handle(wf.id).terminate("fuzzed")


async def test_mcp_endpoint_finds_nothing(agent: Agent) -> None:
    async with idle_api(agent, "fuzz-idle-mcp") as base:
        failures, seen = await asyncio.to_thread(fuzz, base, 200)
    assert not failures, "\n".join(failures[:20])
    assert seen == {"tool error", "result", "protocol error"}


A2A_METHODS = [
    "SendMessage",
    "GetTask",
    "CancelTask",
    "SubscribeToTask",
    "ListTasks",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "message/send",
    "tasks/get",
    "tasks/cancel",
    "no/such/method",
]
task_ids = st.sampled_from(["run-x", "run-x~abc", "thread-acme:t~", "~", ""]) | st.text(max_size=30)
parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"text": st.text(max_size=40)}),
        st.fixed_dictionaries({"data": json_values}),
        st.dictionaries(st.sampled_from(["text", "data", "url", "raw"]), json_values, max_size=2),
    ),
    max_size=3,
)
a2a_messages = st.fixed_dictionaries(
    {
        "messageId": st.text(min_size=1, max_size=20),
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", "x"]),
        "parts": parts,
    },
    optional={"taskId": task_ids, "contextId": st.text(max_size=20)},
)
a2a_calls = st.one_of(
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 1000),
            "method": st.sampled_from(["SendMessage", "message/send"]),
            # a send that would start a run answers at once: the fuzzed runs never run
            "params": st.fixed_dictionaries(
                {"message": a2a_messages, "configuration": st.just({"returnImmediately": True})}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 1000),
            "method": st.sampled_from(A2A_METHODS),
            "params": st.fixed_dictionaries({"id": task_ids}) | json_values,
        }
    ),
    json_values,
)


def fuzz_a2a(base: str, examples: int) -> tuple[list[str], set[int]]:
    """The failures, in words, and the JSON-RPC error codes seen."""
    failures: list[str] = []
    codes: set[int] = set()
    with httpx.Client(base_url=base, timeout=60) as http:

        @fuzzing(examples)
        # malformed JSON, bad params and an unknown task, whatever the draw
        @example({"jsonrpc": "2.0", "id": 1, "method": "GetTask"}, ALICE, True, "1.0")
        @example(
            {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {}}, ALICE, False, "1.0"
        )
        @example(
            {"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "run-x"}},
            ALICE,
            False,
            "1.0",
        )
        @given(
            call=a2a_calls,
            token=tokens,
            raw=st.booleans(),
            version=st.sampled_from(["1.0", "0.3", ""]),
        )
        def check(call: Any, token: str, raw: bool, version: str) -> None:
            body = json.dumps(call).encode()
            if raw:
                body = body[: max(1, len(body) // 2)]
            headers = {**auth(token), "Content-Type": "application/json"}
            if version:
                headers["A2A-Version"] = version
            answer = http.post("/a2a/helper/", content=body, headers=headers)
            text = answer.text
            if answer.status_code >= 500 or "Traceback" in text or '"code":-32603' in text:
                failures.append(f"{answer.status_code} for {body[:300]!r}: {text[:500]}")
            with contextlib.suppress(ValueError, KeyError, AttributeError, TypeError):
                codes.add(int(answer.json()["error"]["code"]))

        check()
    return failures, codes


async def test_a2a_endpoint_finds_nothing(agent: Agent, tmp_path: Path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[helper]\nsystem_prompt = "You help."\nmax_steps = 3\n')
    agent.configure(agents_file=agents)
    async with idle_api(agent, "fuzz-idle-a2a") as base:
        failures, codes = await asyncio.to_thread(fuzz_a2a, base, 200)
    assert not failures, "\n".join(failures[:20])
    # malformed JSON, bad params and unknown tasks all reached their protocol errors
    assert {-32700, -32602, -32001} <= codes, codes


async def test_deeply_nested_bodies_are_client_errors(agent: Agent, tmp_path: Path) -> None:
    """JSON nested past any parser's recursion: a protocol error, never a 5xx."""
    agents = tmp_path / "agents.toml"
    agents.write_text('[helper]\nsystem_prompt = "You help."\nmax_steps = 3\n')
    agent.configure(agents_file=agents)
    deep = b"[" * 200_000 + b"]" * 200_000  # within the body limit (1 MiB)
    async with agent.serving([]) as live, served(app_for(live.client)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            headers = {**ACCEPT, **auth(ALICE), "Content-Type": "application/json"}
            mcp = await http.post("/mcp", content=deep, headers=headers)
            a2a = await http.post(
                "/a2a/helper/", content=deep, headers={**headers, "A2A-Version": "1.0"}
            )
            agui = await http.post("/agui", content=deep, headers=headers)
    assert mcp.status_code < 500, mcp.text
    assert a2a.status_code == 200 and a2a.json()["error"]["code"] == -32700, a2a.text
    assert agui.status_code == 422, agui.text
