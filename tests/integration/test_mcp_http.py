"""MCP over streamable HTTP (`capstan serve`, `/mcp`), as a model client would use it: the MCP
SDK's own client on a real socket, with the API's bearer tokens. A token reaches its tenant's
runs only and acts within its scopes; an approval is put to the client's user by elicitation
(in the 2025-11-25 handshake and in 2026-07-28's input-required round trips) and decided
with the hash of the arguments shown; no token, or another token on a session, is refused."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult

from capstan.client.runs import CapstanClient
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import (
    ALICE,
    MALLORY,
    READER,
    app_for,
    auth,
    served,
)

pytestmark = pytest.mark.server


@contextlib.asynccontextmanager
async def mcp_as(
    base: str, token: str, *, mode: str = "legacy", answers: list[dict[str, Any]] | None = None
) -> AsyncIterator[Client]:
    """An MCP client on `base`/mcp with `token`; `answers` are what its user fills in, in
    order, when asked (each asking is recorded in `asked`)."""
    replies = list(answers or [])

    async def elicit(context: Any, params: ElicitRequestParams) -> ElicitResult:
        ASKED.append(params.message)
        if not replies:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content=replies.pop(0))

    http = httpx2.AsyncClient(headers=auth(token), timeout=60)
    transport = streamable_http_client(f"{base}/mcp", http_client=http)
    async with http, Client(transport, mode=mode, elicitation_callback=elicit) as client:  # type: ignore[arg-type]
        yield client


ASKED: list[str] = []


def data(result: Any) -> Any:
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(result.content[0].text)


def text(result: Any) -> str:
    return str(result.content[0].text)


async def open_approval(mcp: Client, run_id: str) -> dict[str, Any]:
    for _ in range(200):
        waiting = data(await mcp.call_tool("pending", {"run_id": run_id}))
        if waiting["approvals"]:
            return dict(waiting["approvals"][0])
    raise AssertionError(f"{run_id} never asked for approval")


def writes(step: int, messages: list[dict[str, Any]]) -> Any:
    """Each run writes the file its task names ("write one" writes one.txt), then finishes."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    path = f"{str(task).split()[-1]}.txt"
    if step == 0:
        return say(call("write_file", path=path, content="from MCP over HTTP"))
    return say(call("finish", answer=f"wrote {path}"))


async def test_tenants_scopes_and_review_by_elicitation(agent: Agent, workspace) -> None:
    ASKED.clear()
    async with agent.serving(writes) as live, served(app_for(live.client)) as base:
        client: CapstanClient = live.client
        # the 2025-11-25 handshake: the user is asked mid-call (elicitation/create)
        async with mcp_as(base, ALICE, answers=[{"decision": "approve"}]) as alice:
            run_id = data(await alice.call_tool("start_run", {"task": "write one"}))["run_id"]
            request = await open_approval(alice, run_id)
            async with mcp_as(base, MALLORY) as mallory:
                hidden = await mallory.call_tool("run_status", {"run_id": run_id})
                hidden_decision = await mallory.call_tool("approve", {"run_id": run_id})
                with pytest.raises(Exception, match="no run"):
                    await mallory.read_resource(f"capstan://runs/{run_id}/audit")
            async with mcp_as(base, READER) as reader:
                seen = data(await reader.call_tool("pending", {"run_id": run_id}))
                refused = await reader.call_tool("approve", {"run_id": run_id})
                not_started = await reader.call_tool("start_run", {"task": "x"})
            wrong = {"run_id": run_id, "args_hash": "0" * 64}
            mismatched = await alice.call_tool("approve", wrong)  # not the call that waits
            reviewed = await alice.call_tool("review", {"run_id": run_id})
            result = data(
                await alice.call_tool("run_result", {"run_id": run_id, "wait_seconds": 60})
            )
            audit = await alice.read_resource(f"capstan://runs/{run_id}/audit")
        # 2026-07-28: the same question as an input-required round trip
        async with mcp_as(
            base, ALICE, mode="auto", answers=[{"decision": "deny", "reason": "no"}]
        ) as alice:
            second = data(await alice.call_tool("start_run", {"task": "write two"}))["run_id"]
            await open_approval(alice, second)
            denied = await alice.call_tool("review", {"run_id": second})
            deny_result = data(
                await alice.call_tool("run_result", {"run_id": second, "wait_seconds": 60})
            )
        history = [e async for e in client.handle(run_id).fetch_history_events()]
    assert hidden.is_error and text(hidden).endswith(f": no run {run_id!r}")
    assert hidden_decision.is_error and text(hidden_decision).endswith(f": no run {run_id!r}")
    assert seen["approvals"][0]["request_id"] == request["request_id"]
    assert refused.is_error and "lacks the 'approve' scope" in text(refused)
    assert not_started.is_error and "lacks the 'steer' scope" in text(not_started)
    assert mismatched.is_error and "\n" not in text(mismatched), text(mismatched)
    assert not reviewed.is_error and text(reviewed) == "approved", text(reviewed)
    assert "write_file" in ASKED[0] and "one.txt" in ASKED[0] and request["request_id"] in ASKED[0]
    assert result["terminal_reason"] == TerminalReason.COMPLETED.value
    acme = workspace / ".capstan-tenants" / "acme" / ".workspace"  # the tenant's own workspace
    assert (acme / "one.txt").read_text() == "from MCP over HTTP"
    assert f"run `{run_id}`" in audit.contents[0].text
    # the decision went in alice's name, bound to the hash she was shown
    assert b"alice@acme" in b"".join(e.SerializeToString() for e in history)
    assert request["args_hash"].encode() in b"".join(e.SerializeToString() for e in history)
    assert "two.txt" in ASKED[1]
    assert not denied.is_error and text(denied) == "denied"
    assert not (acme / "two.txt").exists()
    assert deny_result["ended"]


async def test_no_token_and_another_tokens_session_are_refused(agent: Agent) -> None:
    async with agent.serving([]) as live, served(app_for(live.client)) as base:
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            anonymous = await http.post("/mcp", json=initialize, headers=headers)
            wrong = await http.post("/mcp", json=initialize, headers={**headers, **auth("x" * 20)})
            opened = await http.post("/mcp", json=initialize, headers={**headers, **auth(ALICE)})
            session = opened.headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            stolen = await http.post(
                "/mcp",
                json=listing,
                headers={**headers, **auth(MALLORY), "mcp-session-id": session},
            )
            garbage = await http.post(
                "/mcp",
                content=b"{not json",
                headers={**headers, **auth(ALICE), "Content-Type": "application/json"},
            )
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith(
        "Bearer"
    )
    assert anonymous.json()["error"] == "invalid_token"
    assert wrong.status_code == 401
    assert opened.status_code == 200
    assert stolen.status_code == 404  # as if the session did not exist
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
