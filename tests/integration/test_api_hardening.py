"""`capstan serve` against hostile input, as an outside client meets it (real sockets, httpx):
headers beyond ASCII or too long, run and thread ids with a trailing newline, login CSRF and
cross-site writes with the inbox's cookie, a FIFO raced into a pending write's path, a server
without the codec key, and the bookkeeping `continued_as_new` events kept out of the stream."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.api.stream import run_stream
from capstan.audit.events import derive_events
from capstan.audit.history import decode_history, load_histories
from capstan.client.runs import CapstanClient, connect_temporal
from capstan.core.spec import TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.conftest import free_port
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending
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
from tests.integration.test_codec_runs import (  # noqa: F401 (fixtures)
    Canaries,
    canary_run,
    sealed,
    sealed_namespace,
)

pytestmark = pytest.mark.server

ROOT_DIR = Path(__file__).resolve().parents[2]


async def _idle_run(http: httpx.AsyncClient, agent: Agent) -> str:
    """A run of acme's (no worker serves it: the tests only read it); terminated at the end."""
    r = await http.post("/api/runs", json=body_of(agent.spec()), headers=auth(ALICE))
    assert r.status_code == 201, r.text
    run_id: str = r.json()["run_id"]
    return run_id


def _raw(token: str, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", f"Bearer {token}".encode()), *extra]


def _refused(r: httpx.Response, field: str) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid" and r.json()["error"]["field"] == field, r.text


async def test_headers_beyond_ascii_or_too_long_are_422(agent: Agent) -> None:
    async with served(app_for(agent.client)) as base, httpx.AsyncClient(base_url=base) as http:
        run_id = await _idle_run(http, agent)
        events = f"/api/runs/{run_id}/events"
        try:
            for value in (b"\xb2", "é".encode(), b"1\xff"):  # `²` passed isdigit: a 500
                r = await http.get(events, headers=_raw(ALICE, (b"Last-Event-ID", value)))
                _refused(r, "header.last-event-id")
            r = await http.get(events, headers=_raw(ALICE, (b"Last-Event-ID", b"9" * 30)))
            _refused(r, "header.last-event-id")
            r = await http.get("/api/whoami", headers=[(b"Authorization", "Bearer é".encode())])
            _refused(r, "header.authorization")
            r = await http.get("/api/whoami", headers=_raw("a" * 5000))
            _refused(r, "header.authorization")
            for name in (b"Origin", b"Referer", b"X-Capstan-Request"):
                r = await http.get("/api/whoami", headers=_raw(ALICE, (name, "http://é".encode())))
                _refused(r, f"header.{name.decode().lower()}")
            r = await http.get("/api/whoami", headers=_raw(ALICE, (b"Cookie", b"a=" + b"b" * 9000)))
            _refused(r, "header.cookie")
            # another application's cookie beyond ASCII (every port of a host shares cookies)
            other = (b"Cookie", "theme=é".encode())
            r = await http.get("/api/whoami", headers=_raw(ALICE, other))
            assert r.status_code == 200 and r.json()["identity"] == "alice@acme"
            own = [(b"Cookie", "capstan_token=é".encode())]
            r = await http.get("/api/whoami", headers=own)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
            r = await http.get("/api/whoami", headers=_raw(ALICE, (b"User-Agent", "é".encode())))
            assert r.status_code == 200  # a header nobody reads is left alone
        finally:
            await agent.temporal.get_workflow_handle(run_id).terminate()


async def test_ids_with_a_trailing_newline_are_refused(agent: Agent) -> None:
    async with served(app_for(agent.client)) as base, httpx.AsyncClient(base_url=base) as http:
        body = {**body_of(agent.spec()), "run_id": "hardening-1\n"}
        r = await http.post("/api/runs", json=body, headers=auth(ALICE))
        if r.status_code == 201:  # today's code: started, and listed with the newline
            await agent.temporal.get_workflow_handle(r.json()["run_id"]).terminate()
        _refused(r, "body.run_id")
        for path in ("/api/runs/hardening-1%0A", "/api/runs/hardening-1%0A/pending"):
            r = await http.get(path, headers=auth(ALICE))
            assert r.status_code in (404, 422), r.text
            assert set(r.json()) == {"error"}
        r = await http.post(
            "/api/threads/t-1%0A/messages", json={"text": "hi"}, headers=auth(ALICE)
        )
        _refused(r, "path.thread")
        listed = (await http.get("/api/runs", headers=auth(ALICE), params={"limit": 500})).json()
        assert all("\n" not in run["run_id"] for run in listed)


# --- the inbox's cookie: login CSRF, cross-site writes ---------------------------------------


async def test_sign_in_and_cookie_writes_come_from_the_servers_own_pages(agent: Agent) -> None:
    async with served(app_for(agent.client)) as base, httpx.AsyncClient(base_url=base) as http:
        evil = {"Origin": "https://evil.example"}
        # a form on another site signing the browser in as the attacker (login CSRF)
        for headers in (evil, {"Referer": "https://evil.example/x"}, {"Origin": "null"}, {}):
            r = await http.post("/login", data={"token": MALLORY}, headers=headers)
            assert r.status_code == 403, (headers, r.status_code)
            assert "set-cookie" not in r.headers and "another site" in r.text
        assert not http.cookies
        page = await http.get("/login")
        assert page.headers["referrer-policy"] == "same-origin"  # or the page's Origin is null
        r = await http.post("/login", data={"token": ALICE}, headers={"Referer": f"{base}/login"})
        assert r.status_code == 303, r.text
        r = await http.post("/login", data={"token": ALICE}, headers={"Origin": base})
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        # signed in: a write with the cookie needs this server's origin and the page's header
        body = body_of(agent.spec())
        page_header = {"X-Capstan-Request": "1"}
        for headers in ({**page_header, **evil}, page_header, {**page_header, "Origin": "null"}):
            r = await http.post("/api/runs", json=body, headers=headers)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", headers
        r = await http.post("/api/runs", json=body, headers={"Origin": base})
        assert r.status_code == 403 and "X-Capstan-Request" in r.text
        r = await http.post("/api/runs", json=body, headers={**page_header, "Origin": base})
        assert r.status_code == 201, r.text
        await agent.temporal.get_workflow_handle(r.json()["run_id"]).terminate()
        # a bearer token is no ambient credential: no origin needed
        r = await http.get("/api/whoami", headers=evil)
        assert r.status_code == 200 and r.json()["identity"] == "alice@acme"
        # signing out is a form too, from this server's pages only
        assert (await http.get("/logout")).status_code == 200 and http.cookies
        r = await http.post("/logout", headers=evil)
        assert r.status_code == 403 and "set-cookie" not in r.headers
        r = await http.post("/logout", headers={"Origin": base})
        assert r.status_code == 303 and not http.cookies


# --- the preview of a pending write: a FIFO raced in at its path -----------------------------

#: swaps two paths atomically (renameat2 RENAME_EXCHANGE) as fast as it can, until killed
SWAPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


@contextlib.contextmanager
def swapping(one: Path, other: Path) -> Iterator[None]:
    process = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(one), str(other)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "swapping"
        yield
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


@contextlib.asynccontextmanager
async def capstan_serve(settings: Settings, token: str) -> AsyncIterator[str]:
    """`capstan serve` in a process of its own (a stalled server never stalls the test)."""
    port = free_port()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_API_PORT": str(port),
        "CAPSTAN_API_TOKEN": token,
    }
    env.pop("CAPSTAN_API_TOKENS_FILE", None)
    log = (settings.data_dir / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "capstan", "serve"], env=env, cwd=ROOT_DIR, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=2) as http:

            async def up() -> bool:
                with contextlib.suppress(httpx.TransportError):
                    return (await http.get("/login")).status_code == 200
                return False

            await wait_for(up, bool, 60)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()  # stuck in a blocking open (the defect this guards against)
            process.wait(10)
        log.close()


async def test_a_fifo_at_a_pending_writes_path_stalls_nothing(
    agent: Agent, workspace: Path
) -> None:
    notes, fifo = workspace / "notes.md", workspace / "raced.fifo"
    notes.write_text("# notes\n- one\n")
    os.mkfifo(fifo)
    script = [
        say(call("write_file", path="notes.md", content="# notes\n- one\n- two\n")),
        say(call("finish", answer="done")),
    ]
    token = "hardening-token-0123456789"
    async with (
        agent.serving(script) as live,
        capstan_serve(agent.settings, token) as base,
        httpx.AsyncClient(base_url=base, timeout=15) as http,
    ):
        r = await http.post("/api/runs", json=body_of(agent.spec()), headers=auth(token))
        run_id = r.json()["run_id"]
        await wait_pending(live.client, run_id)
        preview = {"run": run_id}
        r = await http.get("/inbox/items", params=preview, headers=auth(token))
        assert r.status_code == 200 and "+- two" in r.text  # the diff, before the race
        with swapping(notes, fifo):  # a regular file and a FIFO, trading places all along
            for _ in range(40):
                card, other = await asyncio.gather(
                    http.get("/inbox/items", params=preview, headers=auth(token)),
                    http.get("/api/whoami", headers=auth(token)),
                )
                assert card.status_code == 200 and other.status_code == 200
        if not notes.is_fifo():
            os.rename(fifo, notes)  # leave the FIFO at the path
        card, other = await asyncio.gather(
            http.get("/inbox/items", params=preview, headers=auth(token)),
            http.get(f"/api/runs/{run_id}", headers=auth(token)),
        )
        assert card.status_code == 200 and "the path is not a regular file" in card.text
        assert other.status_code == 200 and other.json()["waiting_for"], other.text
        await live.client.decide(run_id, "deny", reason="not now")
        result = await live.client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED


# --- without the codec key ---------------------------------------------------------------------


async def test_without_the_codec_key_one_clear_error(
    sealed: Agent,  # noqa: F811
    workspace: Path,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await canary_run(sealed, workspace, Canaries.new())
    keyless = settings.model_copy(update={"namespace": sealed.settings.namespace})
    client = CapstanClient(await connect_temporal(keyless), keyless)
    async with (
        served(app_for(client)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        for path in ("", "/transcript", "/audit", "/audit/verify", "/events", "/pending"):
            r = await http.get(f"/api/runs/{run.run_id}{path}", headers=auth(MALLORY))
            assert r.status_code == 500, (path, r.text)
            assert r.headers["content-type"] == "application/json", path
            error = r.json()["error"]
            assert error["code"] == "codec_key", (path, error)
            assert "key id 'k1'" in error["message"] and "CAPSTAN_CODEC_KEYS" in error["message"]
        r = await http.get("/api/runs", headers=auth(MALLORY), params={"limit": 500})
        assert r.status_code == 500 and r.json()["error"]["code"] == "codec_key", r.text
    # a stream already under way when it meets an encrypted event ends with an `error` event
    messages = [m async for m in run_stream(client, run.run_id, 0, 2.0, 0.2)]
    assert messages[-1].startswith("event: error\n") and "key id 'k1'" in messages[-1]
    assert "CAPSTAN_CODEC_KEYS" in messages[-1] and "run_event" not in "".join(messages)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", keyless.namespace)
    monkeypatch.delenv("CAPSTAN_CODEC_KEYS", raising=False)
    for args in (("audit", run.run_id), ("audit", run.run_id, "--verify")):
        out = await asyncio.to_thread(run_cli, keyless, *args)
        assert out.returncode != 0, out
        assert out.stderr.strip() == (
            "capstan: a payload is encrypted (key id 'k1') and no key is configured: set "
            "CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE"
        ), out.stderr


async def test_a_waiting_encrypted_run_seen_without_the_key(
    sealed: Agent,  # noqa: F811
    settings: Settings,
) -> None:
    """The listings of running runs (pending, the inbox, its live stream) meet the run's
    encrypted memo: one clear error each, never a reset connection."""
    script = [say(call("write_file", path="x.txt", content="x")), say(call("finish", answer="ok"))]
    keyless = settings.model_copy(update={"namespace": sealed.settings.namespace})
    client = CapstanClient(await connect_temporal(keyless), keyless)
    async with (
        sealed.serving(script) as live,
        served(app_for(client)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        run_id = await live.start(sealed.spec())
        await wait_pending(live.client, run_id)
        try:
            for path in ("/api/pending", "/inbox/items"):
                r = await http.get(path, headers=auth(ALICE))
                assert r.status_code == 500, (path, r.text)
                assert r.json()["error"]["code"] == "codec_key", (path, r.text)
            async with http.stream("GET", "/inbox/events", headers=auth(ALICE)) as response:
                events = [e async for e in read_sse(response)]
            assert [e.event for e in events] == ["error"]
            assert "key id 'k1'" in events[0].data["message"]
        finally:
            await live.client.decide(run_id, "deny", reason="done")
            await live.client.result(run_id)


# --- the stream: continue-as-new is bookkeeping ------------------------------------------------


async def _stream(http: httpx.AsyncClient, url: str) -> list[SseEvent]:
    out: list[SseEvent] = []
    async with http.stream("GET", url, headers=auth(ALICE)) as response:
        assert response.status_code == 200, await response.aread()
        async for event in read_sse(response):
            out.append(event)
            if event.event == "end":
                break
    return out


def _durable(events: list[SseEvent]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == "run_event"]


async def test_continued_as_new_is_in_the_stream_only_when_asked_for(agent: Agent) -> None:
    script = [
        say(call("list_dir")),
        say(call("write_file", path="out.txt", content="x")),  # a wait for a person
        say(call("list_dir")),
        say(call("finish", answer="ok")),
    ]
    async with (
        agent.serving(script) as live,
        served(app_for(live.client)) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        body = body_of(agent.spec(continue_as_new_every=2))
        run_id = (await http.post("/api/runs", json=body, headers=auth(ALICE))).json()["run_id"]
        await wait_pending(live.client, run_id)
        await live.client.decide(run_id, "approve")
        await live.client.result(run_id)
        url = f"/api/runs/{run_id}/events"
        plain = await _stream(http, url)
        everything = await _stream(http, f"{url}?include=continued_as_new")
        bad = await http.get(f"{url}?include=nonsense", headers=auth(ALICE))
        document = (await http.get("/openapi.json")).json()
        histories = await load_histories(live.client.client, run_id)
    expected = [
        e.model_dump(mode="json") for e in derive_events([decode_history(h) for h in histories])
    ]
    assert sum(e["kind"] == "continued_as_new" for e in expected) >= 1
    assert _durable(everything) == expected
    assert _durable(plain) == [e for e in expected if e["kind"] != "continued_as_new"]
    assert all(e.id == str(e.data["seq"]) for e in plain if e.event == "run_event")
    assert plain[-1].data["next"] == everything[-1].data["next"] == len(expected)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "query.include.0"
    operation = document["paths"]["/api/runs/{run_id}/events"]["get"]
    (include,) = [p for p in operation["parameters"] if p["name"] == "include"]
    assert not include["required"] and "continued_as_new" in include["description"]
    assert document["components"]["schemas"]["StreamExtra"]["enum"] == ["continued_as_new"]
    assert "#/components/schemas/StreamExtra" in str(include["schema"])
