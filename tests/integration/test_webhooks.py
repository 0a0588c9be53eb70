"""Webhooks for opened requests, end to end: a real worker posts to real HTTP receivers.

Each receiver is an `http.server` on a loopback socket in a thread that answers a scripted
sequence of statuses and keeps what it received. Checked: the signature under the secret, the
JSON and Slack bodies, the inbox link, retries with backoff (delivered once), and that a dead
hook neither holds the run up nor goes unnoticed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from capstan.core.notifications import request_anchor
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.runtime.webhooks import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify_signature,
)
from capstan.testing.fake_provider import call, say
from tests.conftest import free_port
from tests.integration.helpers import chain_events, history_events
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=3)
SECRET = "s3cret-for-the-test"
INBOX = "https://inbox.example.test/capstan"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers the statuses of `plan` in order, then 200; keeps every request."""

    plan: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def delivered(self) -> list[Received]:
        """The requests answered 2xx."""
        return self.got[len(self.plan) :]


@contextlib.contextmanager
def receiving(plan: list[int] | None = None) -> Iterator[Receiver]:
    receiver = Receiver(plan=list(plan or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            index = len(receiver.got)
            receiver.got.append(Received(dict(self.headers.items()), body))
            status = receiver.plan[index] if index < len(receiver.plan) else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def hooks_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "webhooks.toml"
    path.write_text(body)
    return path


def json_hook(name: str, url: str) -> str:
    return f'[hooks.{name}]\nurl = "{url}"\nsecret_env = "HOOK_SECRET"\n'


def spec(**kw: Any) -> RunSpec:
    kw.setdefault("tuning", FAST)
    return RunSpec(task="notify me", **kw)


def write(path: str) -> tuple[str, dict[str, object]]:
    return call("write_file", path=path, content="x")


async def test_signed_json_and_slack_bodies_link_to_the_inbox(
    agent: Agent, workspace: Path, tmp_path: Path
) -> None:
    script = [
        say(write("a.txt")),
        say(call("ask_user", question="Which <colour>?", options=["red", "blue"])),
        say(call("finish", answer="done")),
    ]
    with receiving() as ops, receiving() as chat:
        config = json_hook("ops", ops.url)
        config += '[hooks.chat]\nurl_env = "CHAT_URL"\nformat = "slack"\nevents = ["approval"]\n'
        agent.configure(webhooks_file=hooks_file(tmp_path, config), inbox_url=INBOX + "/")
        env = {"HOOK_SECRET": SECRET, "CHAT_URL": chat.url}
        async with agent.serving(script, env=env) as live:
            run_id = await live.start(spec())
            view = await wait_pending(live.client, run_id)
            (approval,) = view.approvals
            await wait_for(_async(lambda: len(ops.got)), lambda n: n >= 1)
            await live.client.decide(run_id, "approve")
            view = await wait_pending(live.client, run_id, lambda p: bool(p.questions))
            (question,) = view.questions
            await wait_for(_async(lambda: len(ops.got)), lambda n: n >= 2)
            await live.client.answer(run_id, question.request_id, "blue")
            run = await live.finish(run_id, history="notify_requests")
            history = json.dumps(await chain_events(live.client.client, run_id))
        assert run.result.terminal_reason is TerminalReason.COMPLETED
        assert SECRET not in history and chat.url not in history and ops.url not in history
        assert history.count('"notify_request"') == 2  # one approval, one question

    first, second = ops.got
    for got in (first, second):
        assert verify_signature(
            SECRET.encode(),
            got.body,
            got.headers[SIGNATURE_HEADER],
            got.headers[TIMESTAMP_HEADER],
            now=time.time(),
        )
        assert not verify_signature(
            b"wrong secret",
            got.body,
            got.headers[SIGNATURE_HEADER],
            got.headers[TIMESTAMP_HEADER],
            now=time.time(),
        )
    body = first.json()
    assert body["event"] == "approval.opened" and body["run_id"] == run_id
    assert body["delivery"] == first.headers[DELIVERY_HEADER] == approval.request_id
    assert body["request"]["tool"] == "write_file"
    assert json.loads(body["request"]["arguments"]) == {"path": "a.txt", "content": "x"}
    anchor = request_anchor(run_id, approval.request_id)  # the card's id on the run page
    assert body["inbox_url"] == f"{INBOX}/runs/{run_id}#{anchor}"
    asked = second.json()
    assert asked["event"] == "question.opened"
    assert asked["request"]["question"] == "Which <colour>?"
    assert asked["request"]["options"] == ["red", "blue"]

    (slack,) = chat.got  # the slack hook wants approvals only
    assert SIGNATURE_HEADER not in slack.headers  # it has no secret
    message = slack.json()
    assert message["text"].startswith(f"Capstan run `{run_id}` asks to approve `write_file`")
    assert f"<{body['inbox_url']}|open in the inbox>" in message["text"]
    button = message["blocks"][-1]["elements"][0]
    assert button["type"] == "button" and button["url"] == body["inbox_url"]
    assert any("a.txt" in b["text"]["text"] for b in message["blocks"] if "text" in b)


async def test_a_failing_hook_is_retried_and_gets_the_request_once(
    agent: Agent, workspace: Path, tmp_path: Path
) -> None:
    script = [say(write("a.txt")), say(call("finish", answer="done"))]
    with receiving([503, 500]) as flaky, receiving() as steady:
        config = json_hook("flaky", flaky.url) + json_hook("steady", steady.url)
        agent.configure(webhooks_file=hooks_file(tmp_path, config))
        async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
            run_id = await live.start(spec())
            await wait_pending(live.client, run_id)
            await wait_for(_async(lambda: len(flaky.delivered())), lambda n: n >= 1, timeout=30)
            await live.client.decide(run_id, "approve")
            run = await live.finish(run_id)
            events = await history_events(live.client.handle(run_id))
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert len(flaky.got) == 3 and len(flaky.delivered()) == 1
    assert len({r.headers[DELIVERY_HEADER] for r in flaky.got}) == 1  # one delivery id
    assert len(steady.got) == 1  # took it on the first attempt; the retries skip it
    started = [e for e in events if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_STARTED"]
    assert max(e["activityTaskStartedEventAttributes"]["attempt"] for e in started) == 3


async def test_a_dead_hook_neither_holds_the_run_nor_goes_unnoticed(
    agent: Agent, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="capstan.activities.notify_request")
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    agent.configure(webhooks_file=hooks_file(tmp_path, json_hook("dead", dead)))
    script = [say(write("a.txt")), say(call("finish", answer="done"))]
    async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
        run_id = await live.start(spec())
        await wait_pending(live.client, run_id)
        await wait_for(_async(lambda: _failures(caplog)), lambda lines: len(lines) >= 1)
        await live.client.decide(run_id, "approve")
        run = await live.finish(run_id, timeout=30)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    line = _failures(caplog)[0]
    assert line.startswith("webhook dead (127.0.0.1): connection refused or unreachable")
    assert SECRET not in caplog.text and "/hook" not in caplog.text


def _failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "capstan.activities.notify_request"]


def _async(get: Any) -> Any:
    async def query() -> Any:
        return get()

    return query


async def test_a_refused_request_is_not_retried_and_the_run_goes_on(
    agent: Agent, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = [say(write("a.txt")), say(call("finish", answer="done"))]
    with receiving([400, 400]) as strict:
        agent.configure(webhooks_file=hooks_file(tmp_path, json_hook("strict", strict.url)))
        async with agent.serving(script, env={"HOOK_SECRET": SECRET}) as live:
            run_id = await live.start(spec())
            await wait_pending(live.client, run_id)
            handle = live.client.handle(run_id)
            failed = await wait_for(
                lambda: history_events(handle),
                lambda events: any(e["eventType"].endswith("ACTIVITY_TASK_FAILED") for e in events),
            )
            await live.client.decide(run_id, "approve")
            run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert len(strict.got) == 1  # a 400 does not heal by retrying
    (failure,) = [e for e in failed if e["eventType"].endswith("ACTIVITY_TASK_FAILED")]
    info = failure["activityTaskFailedEventAttributes"]["failure"]
    assert info["applicationFailureInfo"]["type"] == "WebhookRejectedError"
    assert info["message"] == "webhook strict (127.0.0.1): HTTP 400"
    noted = [r.getMessage() for r in caplog.records if "notification for" in r.getMessage()]
    assert noted and noted[0].startswith(f"webhook notification for {run_id}/")
