"""A fake OpenAI-compatible provider on a real socket, replaying a scripted trajectory.

The reply to a request is chosen by the request itself (the number of assistant messages in it
is the step), so a retried or replayed call gets the same answer: exactly what a durable run
needs to be checked against. Faults (HTTP errors, hangs, garbage) can be scripted per step.
Used by the tests, the bench and the offline demo; never by production code.

Example::

    with FakeProvider([say(call("list_dir")), say(call("finish", answer="done"))]) as fake:
        os.environ["OPENAI_BASE_URL"] = fake.base_url
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeProvider", "Fault", "Reply", "call", "say"]


@dataclass(frozen=True)
class Reply:
    """A scripted reply. `hold_seconds` delays the first attempt of its step only."""

    content: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    hold_seconds: float = 0.0


@dataclass(frozen=True)
class Fault:
    """Answer with `status` (and `body`) for the first `times` attempts of a step."""

    status: int
    body: str = '{"error": {"message": "scripted fault"}}'
    headers: tuple[tuple[str, str], ...] = ()
    times: int = 1


def call(tool: str, /, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return (tool, arguments)


def say(*calls: tuple[str, dict[str, Any]], content: str = "", hold: float = 0.0) -> Reply:
    return Reply(content=content, tool_calls=tuple(calls), hold_seconds=hold)


Script = list[Reply] | Callable[[int, list[dict[str, Any]]], Reply]


@dataclass
class FakeProvider:
    """Serves `POST /v1/chat/completions` from a script on 127.0.0.1."""

    script: Script
    faults: dict[int, Fault] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    model: str = "fake-model"

    def __post_init__(self) -> None:
        self._attempts: dict[int, int] = {}
        self._lock = threading.Lock()
        self.arrived = threading.Event()
        self._seen = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def steps_seen(self) -> list[int]:
        return [_step_of(r["messages"]) for r in self.requests]

    def reply_for(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes, float]:
        messages = body.get("messages", [])
        step = _step_of(messages)
        with self._lock:
            self.requests.append(body)
            attempt = self._attempts.get(step, 0)
            self._attempts[step] = attempt + 1
        self.arrived.set()
        with self._seen:
            self._seen.notify_all()
        fault = self.faults.get(step)
        if fault is not None and attempt < fault.times:
            return fault.status, dict(fault.headers), fault.body.encode(), 0.0
        reply = self._scripted(step, messages)
        payload = _completion(reply, step, self.model)
        hold = reply.hold_seconds if attempt == 0 else 0.0
        return 200, {}, json.dumps(payload).encode(), hold

    def wait_for_step(self, step: int, timeout: float = 60.0) -> None:
        """Block until a request for `step` has arrived (AssertionError on timeout)."""
        with self._seen:
            if not self._seen.wait_for(lambda: step in self._attempts, timeout):
                raise AssertionError(f"the model was not called for step {step} in {timeout}s")

    def _scripted(self, step: int, messages: list[dict[str, Any]]) -> Reply:
        if callable(self.script):
            return self.script(step, messages)
        if step >= len(self.script):
            return Reply(content="(the fake provider's script has ended)")
        return self.script[step]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                status, headers, data, hold = fake.reply_for(body)
                if hold:
                    threading.Event().wait(hold)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


def _step_of(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def _completion(reply: Reply, step: int, model: str) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{step}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{step}",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 100 + 10 * step, "completion_tokens": 20},
    }


def iter_tool_messages(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The tool messages of a recorded request (a test helper)."""
    return (m for m in body.get("messages", []) if m.get("role") == "tool")
