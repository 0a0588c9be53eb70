"""`capstan serve` over REST: what the CLI does, in the CLI's `--json` shapes; tokens, scopes and
tenants; every kind of bad request answered in one JSON body.

Runs are real (dev server, scripted fake model, in-process worker); the API is called in-process
through httpx's ASGI transport.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from capstan.api.app import create_app
from capstan.api.auth import Principal, Scope, TokenStore, digest, load_tokens
from capstan.api.backend import WriteLimiter
from capstan.api.errors import ApiError
from capstan.api.steer_routes import body_model
from capstan.client.runs import CapstanClient
from capstan.client.transcript import build_transcript
from capstan.core.spec import TerminalReason
from capstan.core.steering import STEERING_TYPES
from capstan.core.tenants import workspace_subdir
from capstan.core.workflow_io import StartInput
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import Settings
from capstan.runtime.environment import ConfigError
from capstan.testing.fake_provider import call, say
from tests.conftest import free_port
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending
from tests.integration.test_api_helpers import (
    ALICE,
    MALLORY,
    READER,
    ROOT,
    api_client,
    app_for,
    auth,
    body_of,
)


def spec_json(agent: Agent, **fields: Any) -> dict[str, Any]:
    return body_of(agent.spec(**fields))


def write(path: str, content: str) -> tuple[str, dict[str, object]]:
    return call("write_file", path=path, content=content)


@pytest.mark.server
async def test_a_run_through_the_api_matches_the_cli_shapes(agent: Agent, workspace) -> None:
    """Start, ask, answer, edit and approve, finish: every read in the CLI's `--json` shape, and
    every decision recorded with the token's identity."""
    script = [
        say(call("ask_user", question="Which file?", options=["a.txt", "b.txt"])),
        say(write("a.txt", "first draft")),
        say(call("finish", answer="wrote b.txt")),
    ]
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        r = await http.post(
            "/api/runs", json=spec_json(agent, task="write it"), headers=auth(ALICE)
        )
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        await wait_pending(live.client, run_id, lambda p: bool(p.questions))
        pending = (await http.get("/api/pending", headers=auth(ALICE))).json()
        assert pending == [(await live.client.pending(run_id)).model_dump(mode="json")]
        (question,) = pending[0]["questions"]
        r = await http.post(
            f"/api/runs/{run_id}/answer",
            json={"request_id": question["request_id"], "text": "b.txt"},
            headers=auth(ALICE),
        )
        assert r.status_code == 200 and r.json()["delivery"] == "signal", r.text
        await wait_pending(live.client, run_id)
        one = (await http.get(f"/api/runs/{run_id}/pending", headers=auth(ALICE))).json()
        (request,) = one["approvals"]
        assert request["tool"] == "write_file" and request["args_hash"]
        bad = {"arguments": {"path": "b.txt", "content": 7}}
        r = await http.post(f"/api/runs/{run_id}/approve", json=bad, headers=auth(ALICE))
        assert r.status_code == 422 and r.json()["error"]["field"] == "body.arguments"
        assert "content" in r.json()["error"]["message"]
        edit = {"arguments": {"path": "b.txt", "content": "final"}, "reason": "right file"}
        r = await http.post(f"/api/runs/{run_id}/approve", json=edit, headers=auth(ALICE))
        assert r.status_code == 200, r.text
        assert r.json()["delivery"] == "update" and r.json()["applied"] is True
        run = await live.finish(run_id)
        status = (await http.get(f"/api/runs/{run_id}", headers=auth(READER))).json()
        steps = (await http.get(f"/api/runs/{run_id}/transcript", headers=auth(READER))).json()
        listed = (await http.get("/api/runs", headers=auth(READER))).json()
        trail = await http.get(f"/api/runs/{run_id}/audit", headers=auth(READER))
        verified = (await http.get(f"/api/runs/{run_id}/audit/verify", headers=auth(READER))).json()
        expected_steps = build_transcript(live.client.content(), run.view)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    workspace = workspace / workspace_subdir("acme")  # the tenant's own (capstan.core.tenants)
    assert (workspace / "b.txt").read_text() == "final" and not (workspace / "a.txt").exists()
    assert status == (await live.client.status(run_id)).model_dump(mode="json")
    assert steps == [s.model_dump(mode="json") for s in expected_steps]
    assert listed[0] == {
        "run_id": run_id,
        "status": "completed",
        "started": listed[0]["started"],
        "terminal_reason": "completed",
        "note": None,
    }
    records = [json.loads(line) for line in trail.text.splitlines()]
    assert trail.headers["content-type"].startswith("application/x-ndjson")
    decisions = [r for r in records if r.get("kind") in ("decision", "answer")]
    assert {d.get("identity") for d in decisions} == {"alice@acme"}, decisions
    assert verified == {"records": len(records), "problems": []}


@pytest.mark.server
async def test_steering_routes_from_the_registry(agent: Agent) -> None:
    """Grant, send, pause, resume and cancel through their generated routes."""
    script = [say(call("list_dir"))] + [say(call("list_dir"), hold=0.5) for _ in range(4)]
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        body = spec_json(agent, max_steps=1, wait_for_steps_grant=True)
        run_id = (await http.post("/api/runs", json=body, headers=auth(ALICE))).json()["run_id"]
        await wait_pending(live.client, run_id, lambda p: p.awaiting_steps)

        async def steer(command: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
            r = await http.post(
                f"/api/runs/{run_id}/{command}", json=body, params=params, headers=auth(ALICE)
            )
            assert r.status_code == 200, (command, r.text)
            return r.json()

        granted = await steer("grant", {"steps": 5}, checked="true")
        assert granted["delivery"] == "update" and granted["applied"] is True
        await asyncio.to_thread(live.fake.wait_for_step, 1)
        sent = await steer("send", {"text": "also look at the logs", "id": "m-1"})
        assert sent == {
            "run_id": run_id,
            "input": "message",
            "id": "m-1",
            "delivery": "signal",
            "applied": None,
            "detail": "",
        }
        await asyncio.to_thread(live.fake.wait_for_step, 2)
        await steer("pause", {"reason": "lunch"})
        await wait_for(lambda: live.client.status(run_id), lambda s: s.paused)
        await steer("resume")
        await steer("cancel", {"reason": "enough"})
        run = await live.finish(run_id)
        r = await http.post(f"/api/runs/{run_id}/pause", json={}, headers=auth(ALICE))
    assert r.status_code == 409 and "already ended" in r.json()["error"]["message"]
    assert run.result.terminal_reason is TerminalReason.CANCELLED and run.result.error == "enough"
    assert "also look at the logs" in [m["content"] for m in run.messages(2, "user")]


def test_every_registry_input_has_a_route() -> None:
    """A new steering input type gets its route (and its body) from the registry."""
    app = create_app(Settings(), ApiSettings(), tokens=TokenStore({}))
    paths = app.openapi()["paths"]
    for kind in STEERING_TYPES:
        if kind.wire.custom_cli:
            continue
        path = f"/api/runs/{{run_id}}/{kind.wire.commands[0]}"
        assert "post" in paths[path], path
        fields = set(body_model(kind).model_fields)
        assert fields == set(kind.model_fields) - {"kind", "identity"}
        assert "identity" not in fields  # the token's identity is recorded, never a claimed one
    assert {"/api/runs/{run_id}/approve", "/api/runs/{run_id}/deny"} <= set(paths)


def _every_route(run_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(method, path, body) for every route that names a run."""
    base = f"/api/runs/{run_id}"
    reads = ["", "/transcript", "/pending", "/events", "/audit", "/audit/verify"]
    bodies: dict[str, dict[str, Any]] = {
        "approve": {},
        "deny": {"reason": "no"},
        "pause": {},
        "resume": {},
        "cancel": {"reason": "x"},
        "send": {"text": "hi"},
        "answer": {"request_id": f"{run_id}/1/c", "text": "x"},
        "grant": {"steps": 1},
        "grant-budget": {"budget": "tool_calls", "amount": 1},
        "fork": {"at_step": 1},
    }
    return [("GET", base + r, None) for r in reads] + [
        ("POST", f"{base}/{command}", body) for command, body in bodies.items()
    ]


@pytest.mark.server
async def test_another_tenant_sees_and_steers_nothing(agent: Agent) -> None:
    """Every route answers another tenant's run exactly as an unknown one, and changes nothing;
    the tenant (kept in the memo) survives continue-as-new."""
    script = [say(call("list_dir")), say(call("list_dir")), say(write("a.txt", "A"))]
    async with agent.serving(script) as live, api_client(app_for(live.client)) as http:
        body = spec_json(agent, continue_as_new_every=1)
        run_id = (await http.post("/api/runs", json=body, headers=auth(ALICE))).json()["run_id"]
        await wait_pending(live.client, run_id)
        assert (await live.client.describe(run_id)).run_id != (
            await live.client.handle(run_id).describe()
        ).raw_description.workflow_execution_info.first_run_id  # continued as new
        cli_run = await live.start(agent.spec("started by the CLI"))
        for method, path, payload in _every_route(run_id):
            theirs = await http.request(method, path, json=payload, headers=auth(MALLORY))
            unknown = await http.request(
                method, path.replace(run_id, "no-such-run"), json=payload, headers=auth(MALLORY)
            )
            assert theirs.status_code == 404, (path, theirs.text)
            assert theirs.json() == json.loads(unknown.text.replace("no-such-run", run_id))
        for method, path, payload in _every_route(cli_run)[:3]:
            r = await http.request(method, path, json=payload, headers=auth(ALICE))
            assert r.status_code == 404, path  # runs from the CLI belong to `default`
        theirs_listed = (await http.get("/api/runs", headers=auth(MALLORY))).json()
        theirs_pending = (await http.get("/api/pending", headers=auth(MALLORY))).json()
        mine = (await http.get("/api/runs", headers=auth(ALICE))).json()
        pending = (await live.client.pending(run_id)).approvals
        status = (await http.get(f"/api/runs/{run_id}", headers=auth(ALICE))).json()
        await live.client.cancel(run_id)
        await live.client.cancel(cli_run)
        await live.finish(run_id)
    assert run_id in [r["run_id"] for r in mine] and cli_run not in [r["run_id"] for r in mine]
    assert run_id not in json.dumps([theirs_listed, theirs_pending])
    assert len(pending) == 1 and not status["paused"]  # nothing mallory sent arrived


@pytest.mark.server
async def test_tokens_and_scopes(agent: Agent) -> None:
    """No token, a bad token, a missing scope, a gate-weakening spec without admin, a cookie
    without the page's header: each refused with a clear body."""
    async with api_client(app_for(agent.client)) as http:
        body = spec_json(agent)
        r = await http.post("/api/runs", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"] == {
            "code": "unauthorized",
            "message": "no bearer token: send `Authorization: Bearer TOKEN`",
            "field": None,
        }
        r = await http.get("/api/runs", headers=auth("not-a-token-at-all"))
        assert r.status_code == 401 and "not valid" in r.json()["error"]["message"]
        r = await http.post("/api/runs", json=body, headers=auth(READER))
        assert r.status_code == 403 and "'steer'" in r.json()["error"]["message"]
        r = await http.post("/api/runs", json={**body, "auto_approve": True}, headers=auth(ALICE))
        assert r.status_code == 403 and "auto_approve" in r.json()["error"]["message"]
        r = await http.post(
            "/api/runs",
            json={**body, "tool_policy": {"write_file": {"decision": "allow"}}},
            headers=auth(ROOT),
        )
        assert r.status_code == 201
        await agent.client.cancel(r.json()["run_id"])
        http.cookies.set("capstan_token", ALICE)
        assert (await http.get("/api/whoami")).json() == {
            "identity": "alice@acme",
            "tenant": "acme",
            "scopes": ["approve", "read", "steer"],
        }
        r = await http.post("/api/runs", json=body)
        assert r.status_code == 403 and "X-Capstan-Request" in r.json()["error"]["message"]
        page = {"X-Capstan-Request": "1", "Origin": "http://api"}  # from the server's pages
        r = await http.post("/api/runs", json=body, headers=page)
        assert r.status_code == 201
        await agent.client.cancel(r.json()["run_id"])


@pytest.mark.server
async def test_bad_input_is_answered_clearly(agent: Agent) -> None:
    async with api_client(app_for(agent.client, max_body_bytes=4096)) as http:
        r = await http.post("/api/runs", json={"task": "x" * 10_000}, headers=auth(ALICE))
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

        async def chunks() -> Any:
            for _ in range(10):
                yield b" " * 1000

        r = await http.post("/api/runs", content=chunks(), headers=auth(ALICE))
        assert r.status_code == 413  # no Content-Length: counted as it arrives
        r = await http.post("/api/runs", json={"task": "x", "max_steps": 0}, headers=auth(ALICE))
        assert r.status_code == 422
        assert r.json()["error"]["field"] == "body.max_steps"
        assert "greater than or equal to 1" in r.json()["error"]["message"]
        r = await http.post("/api/runs", json={"task": "x", "run_id": "a'b"}, headers=auth(ALICE))
        assert r.status_code == 422 and r.json()["error"]["field"] == "body.run_id"
        r = await http.post(
            "/api/runs/nope/send", json={"text": "hi", "extra": 1}, headers=auth(ALICE)
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "body.extra"
        r = await http.get("/api/runs/no-such-run", headers=auth(ALICE))
        assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"
        r = await http.get("/api/nothing-here", headers=auth(ALICE))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        taken = (await http.post("/api/runs", json={"task": "x"}, headers=auth(ALICE))).json()
        await agent.client.cancel(taken["run_id"])
        r = await http.post(
            "/api/runs", json={"task": "x", "run_id": taken["run_id"]}, headers=auth(MALLORY)
        )
        assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"


async def test_temporal_unavailable_is_503_with_retry_after() -> None:
    """Nothing listens at the address: every run route says 503 and when to retry, never a
    trace; a body too large is still refused first (nothing reaches Temporal)."""
    settings = Settings(temporal_address=f"127.0.0.1:{free_port()}")
    store = TokenStore(
        {digest(ALICE): Principal(identity="a", tenant="t", scopes=frozenset({Scope.ADMIN}))}
    )
    app = create_app(settings, ApiSettings(max_body_bytes=2048), tokens=store)
    async with api_client(app) as http:
        r = await http.get("/api/runs", headers=auth(ALICE))
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["error"]["code"] == "temporal_unavailable"
        assert "Traceback" not in r.text
        r = await http.post("/api/runs", json={"task": "x" * 4000}, headers=auth(ALICE))
        assert r.status_code == 413


@pytest.mark.server
async def test_writes_are_rate_limited_per_token(agent: Agent) -> None:
    async with api_client(app_for(agent.client, writes_per_minute=2)) as http:
        codes = []
        for _ in range(3):
            r = await http.post("/api/runs/no-such-run/pause", json={}, headers=auth(ALICE))
            codes.append(r.status_code)
        assert codes == [404, 404, 429]
        assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["code"] == "rate_limited"
        r = await http.post("/api/runs/no-such-run/pause", json={}, headers=auth(ROOT))
        assert r.status_code == 404  # another token has its own allowance
        r = await http.get("/api/runs/no-such-run", headers=auth(ALICE))
        assert r.status_code == 404  # reads are not limited


def test_write_limiter_refills() -> None:
    now = [0.0]
    limiter = WriteLimiter(60, clock=lambda: now[0])
    who = Principal(identity="a", tenant="t", scopes=frozenset({Scope.STEER}))
    for _ in range(60):
        limiter.take(who)
    with pytest.raises(ApiError) as refused:
        limiter.take(who)
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
    now[0] = 1.0
    limiter.take(who)


def test_tokens_file(tmp_path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[token]]\nsha256 = "{digest(ALICE)}"\nidentity = "alice@acme"\ntenant = "acme"\n'
        'scopes = ["read", "approve"]\n\n'
        '[[token]]\ntoken = "plain-token-0123456789"\nidentity = "bot"\n'
    )
    store = load_tokens(ApiSettings(tokens_file=path))
    alice = store.find(ALICE)
    assert alice is not None and alice.tenant == "acme" and alice.may(Scope.APPROVE)
    assert not alice.may(Scope.STEER)
    bot = store.find("plain-token-0123456789")
    assert bot is not None and bot.tenant == "default" and bot.scopes == {Scope.READ}
    assert store.find("nope") is None
    path.write_text('[[token]]\nidentity = "x"\nscopes = ["root"]\ntoken = "0123456789abcdefgh"\n')
    with pytest.raises(ConfigError, match=r"token 1: scopes\.0"):
        load_tokens(ApiSettings(tokens_file=path))
    with pytest.raises(ConfigError, match="needs tokens"):
        load_tokens(ApiSettings())
    with pytest.raises(ConfigError, match="at least 16"):
        load_tokens(ApiSettings(token="short"))


async def test_a_run_from_an_agent_definition(agent: Agent, tmp_path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[lister]\nsystem_prompt = "You list."\nallowed_tools = ["list_dir"]\n')
    settings = agent.client.settings.model_copy(update={"agents_file": agents})
    client = CapstanClient(agent.client.client, settings)
    async with api_client(app_for(client)) as http:
        body = {"task": "list", "agent": "lister", "max_steps": 3}
        r = await http.post("/api/runs", json=body, headers=auth(ALICE))
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        bad = {"task": "list", "agent": "nobody"}
        r = await http.post("/api/runs", json=bad, headers=auth(ALICE))
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.agent"
    assert "no agent 'nobody'" in r.json()["error"]["message"]
    assert str(tmp_path) not in r.text  # no server paths in answers
    history = await client.handle(run_id).fetch_history()
    (payload,) = history.events[0].workflow_execution_started_event_attributes.input.payloads
    spec = StartInput.model_validate_json(payload.data).spec
    assert spec.agent == "lister" and spec.system_prompt == "You list." and spec.max_steps == 3
    assert spec.allowed_tools == ("list_dir",)
    await client.cancel(run_id)
