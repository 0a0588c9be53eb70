"""Webhooks are someone else's servers: what a hostile or broken one can cost the worker.

Real receivers on loopback sockets, a real in-process worker. Checked: an answer of 100 MB is
cut after a few KiB and the worker's peak RSS does not grow by it; an answer that drips forever
is ended by the delivery's own deadline (not by the activity's); 120 hanging deliveries neither
take the slots another run's steps need nor go past their own bound; and no log record or
history event of failing deliveries shows the hook's secret or its URL's tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from capstan.activities.deliveries import MAX_CONCURRENT
from capstan.core.spec import ActivityTuning, GuardPolicy, RunSpec, TerminalReason, ToolRule
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import chain_events
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=3)
SECRET = "hook-secret-Zq81xk2"
BODY_BYTES = 100 * 1024 * 1024
#: the worker's peak RSS may grow by this much while a 100 MB answer arrives (it held all of it)
RSS_GROWTH_KIB = 40 * 1024


def spec(**kw: Any) -> RunSpec:
    kw.setdefault("tuning", FAST)
    return RunSpec(task="notify me", **kw)


def hooks_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "webhooks.toml"
    path.write_text(body)
    return path


def json_hook(name: str, url: str, extra: str = "") -> str:
    return f'[hooks.{name}]\nurl = "{url}"\nsecret_env = "HOOK_SECRET"\n{extra}'


def _async(get: Any) -> Any:
    async def query() -> Any:
        return get()

    return query


@dataclass
class Flood:
    """Answers every POST 200 with a body of `BODY_BYTES` (or one byte per `drip` seconds,
    forever), but the first `small` POSTs with an empty one; notes how far each answer got
    before the client hung up."""

    drip: float | None = None
    small: int = 0
    posts: int = 0
    port: int = 0
    sent: list[int] = field(default_factory=list)  # bytes of each answer that went out
    cut: list[bool] = field(default_factory=list)  # the client closed before the end
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@contextlib.contextmanager
def flooding(drip: float | None = None, small: int = 0) -> Iterator[Flood]:
    flood = Flood(drip=drip, small=small)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            flood.posts += 1
            self.send_response(200)
            big = flood.posts > flood.small
            self.send_header("Content-Length", str(BODY_BYTES if big else 0))
            self.end_headers()
            if not big:
                return
            sent, cut = 0, False
            chunk = b"x" if drip else b"x" * 65_536
            try:
                while sent < BODY_BYTES and not flood.stop.is_set():
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += len(chunk)
                    if drip:
                        flood.stop.wait(drip)
            except OSError:
                cut = True
            flood.sent.append(sent)
            flood.cut.append(cut)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    flood.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield flood
    finally:
        flood.stop.set()
        server.shutdown()
        server.server_close()


def _kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field_name} in /proc/self/status")


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS (Linux 4.0+)


async def test_a_hundred_megabyte_answer_is_cut_and_the_worker_does_not_hold_it(
    agent: Agent, workspace: Path, tmp_path: Path
) -> None:
    """The first request's delivery (answered empty) warms every code path up; the peak RSS
    is measured from its approval on, over the next step and the 100 MB answer."""
    write = call("write_file", path="a.txt", content="x")
    script = [
        say(write),
        say(call("write_file", path="b.txt", content="y")),
        say(call("finish", answer="ok")),
    ]
    with flooding(small=1) as flood:
        agent.configure(webhooks_file=hooks_file(tmp_path, json_hook("flood", flood.url)))
        async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
            run_id = await live.start(spec())
            await wait_pending(live.client, run_id)
            await wait_for(_async(lambda: flood.posts), lambda n: n >= 1)
            _reset_peak_rss()
            before = _kib("VmRSS")
            await live.client.decide(run_id, "approve")
            await wait_for(_async(lambda: list(flood.sent)), lambda sent: len(sent) >= 1)
            grew = _kib("VmHWM") - before
            await wait_pending(live.client, run_id)
            await live.client.decide(run_id, "approve")
            run = await live.finish(run_id, timeout=30)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert flood.cut[0] and flood.sent[0] < BODY_BYTES  # the delivery stopped reading
    assert grew < RSS_GROWTH_KIB, f"peak RSS grew by {grew} KiB while the answer came"


async def test_an_answer_that_drips_forever_ends_at_the_delivery_deadline(
    agent: Agent, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every read of a byte per 0.2 s is within a 1 s read timeout: only a deadline for the
    whole delivery ends it (before the activity's own 20 s timeout would)."""
    caplog.set_level(logging.WARNING, logger="capstan.activities.notify_request")
    script = [say(call("write_file", path="a.txt", content="x")), say(call("finish", answer="ok"))]
    with flooding(drip=0.2) as drip:
        config = json_hook("drip", drip.url, "timeout = 1\n")
        agent.configure(webhooks_file=hooks_file(tmp_path, config))
        async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
            run_id = await live.start(spec())
            await wait_pending(live.client, run_id)
            lines = await wait_for(_async(lambda: _notify_lines(caplog)), bool, timeout=15)
            await live.client.decide(run_id, "approve")
            run = await live.finish(run_id, timeout=30)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert lines[0] == "webhook drip (127.0.0.1): timed out (attempt 1)"


def _notify_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "capstan.activities.notify_request"]


@dataclass
class Hanging:
    """Takes connections and never answers; counts those the client gave up on."""

    opened: int = 0
    closed: int = 0
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@contextlib.asynccontextmanager
async def hanging() -> AsyncIterator[Hanging]:
    state = Hanging()
    writers: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.opened += 1
        writers.append(writer)
        with contextlib.suppress(OSError):
            while await reader.read(65_536):
                pass
        state.closed += 1

    server = await asyncio.start_server(hold, "127.0.0.1", 0, family=socket.AF_INET)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        for writer in writers:
            writer.close()


async def test_hanging_deliveries_never_delay_another_runs_steps(
    agent: Agent, workspace: Path, tmp_path: Path
) -> None:
    """One run opens 120 approvals at once, each delivered to a hook that never answers (more
    than a worker's 100 activity slots). Another run then takes its three steps and finishes
    while every delivery still hangs: none has given up, none was needed to free a slot."""
    writes = [call("write_file", path=f"f{i}.txt", content="x") for i in range(120)]
    script = [say(*writes), say(call("list_dir", path=".")), say(call("finish", answer="ok"))]
    async with hanging() as hook:
        config = json_hook("hang", hook.url, "timeout = 15\n")
        agent.configure(webhooks_file=hooks_file(tmp_path, config))
        async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
            flooded = await live.start(spec())
            await wait_pending(live.client, flooded, lambda p: len(p.approvals) == 120)
            await wait_for(_async(lambda: hook.opened), lambda n: n >= MAX_CONCURRENT)
            denied = {"write_file": ToolRule(decision="deny")}  # narrower: no approval to wait
            guards = GuardPolicy(similar_nudge=500, similar_abort=500)  # 120 denials are fine
            other = await live.start(spec(tool_policy=denied, guards=guards))
            run = await live.finish(other, timeout=60)
            opened, closed = hook.opened, hook.closed
            await live.client.cancel(flooded)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.steps == 3
    assert closed == 0, f"{closed} deliveries gave up before the other run finished"
    assert opened <= MAX_CONCURRENT  # deliveries in flight have their own bound


async def test_failing_deliveries_log_no_secret_and_no_url_token(
    agent: Agent, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = ["pw-Jd82hGq1", "path-Rt5sWq9z", "query-Lk3vNb7m", SECRET, "port-Xc9vBn2m"]
    script = [say(call("write_file", path="a.txt", content="x")), say(call("finish", answer="ok"))]
    got: list[bytes] = []

    class Refuses(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(500 if len(got) == 1 else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://ops:{tokens[0]}@127.0.0.1:{port}/{tokens[1]}?token={tokens[2]}"
    config = json_hook("ops", url) + '[hooks.bad]\nurl_env = "BAD_URL"\nformat = "slack"\n'
    env = {"HOOK_SECRET": SECRET, "BAD_URL": f"http://127.0.0.1:{tokens[4]}/?t={tokens[2]}"}
    agent.configure(webhooks_file=hooks_file(tmp_path, config))
    try:
        async with agent.serving(script, env=env) as live:
            run_id = await live.start(spec())
            await wait_pending(live.client, run_id)
            await wait_for(_async(lambda: len(got)), lambda n: n >= 2, timeout=30)
            failed = await wait_for(
                lambda: chain_events(live.client.client, run_id),
                lambda events: any(e["eventType"].endswith("TASK_FAILED") for e in events),
            )
            await live.client.decide(run_id, "approve")
            run = await live.finish(run_id, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    history = json.dumps(failed)
    assert "webhook ops (127.0.0.1): HTTP 400" in history
    assert "webhook bad (127.0.0.1): its URL is not valid" in history
    for token in tokens:
        assert token not in caplog.text, f"{token} is in the worker's log"
        assert token not in history, f"{token} is in the run's history"
