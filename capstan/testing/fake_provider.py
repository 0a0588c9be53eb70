"""A fake model provider on a real socket, replaying a scripted trajectory.

It speaks the OpenAI chat completions API (`/v1/chat/completions`) and the Anthropic Messages
API (`/v1/messages`), each as one JSON reply or streamed as server-sent events, and reports
input tokens from the size of the request, so context accounting sees realistic numbers.

The reply to a request is chosen by the request itself (the number of assistant messages in it
is the step), so a retried or replayed call gets the same answer: exactly what a durable run
needs to be checked against. Faults (HTTP errors, hangs, garbage) can be scripted per step.
Used by the tests, the bench and the offline demo; never by production code.

Example::

    with FakeProvider([say(call("list_dir")), say(call("finish", answer="done"))]) as fake:
        os.environ["OPENAI_BASE_URL"] = fake.base_url
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from capstan.testing.wire import (
    Turn,
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
)

__all__ = ["Call", "FakeProvider", "Fault", "Reply", "call", "finish", "say"]


SUMMARY_MARKER = "You compress the history"


@dataclass(frozen=True)
class Reply:
    """A scripted reply. `hold_seconds` delays the first attempt of its step only;
    `chunk_delay` paces a streamed reply; `stop` overrides the finish reason."""

    content: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    hold_seconds: float = 0.0
    reasoning: str = ""
    stop: str | None = None
    chunk_delay: float = 0.0


@dataclass(frozen=True)
class Fault:
    """For the first `times` attempts of a step: answer with `status` and `body`, or, with
    `cut`, start a streamed reply and break the connection half-way, or, with `events`, stream
    exactly these server-sent events (`(event name or None, data)`: garbage, an error event)."""

    status: int = 500
    body: str = '{"error": {"message": "scripted fault"}}'
    headers: tuple[tuple[str, str], ...] = ()
    times: int = 1
    cut: bool = False
    events: tuple[tuple[str | None, str], ...] = ()


Call = tuple[str, dict[str, Any]]


def call(tool: str, /, **arguments: Any) -> Call:
    """A tool call the model makes: `call("read_file", path="a.txt")`."""
    return (tool, arguments)


def say(
    *parts: Call | str,
    content: str = "",
    hold: float = 0.0,
    reasoning: str = "",
    stop: str | None = None,
    chunk_delay: float = 0.0,
) -> Reply:
    """One reply of the model: its text (a string, or `content=`) and the tool calls it makes
    in parallel: `say("Reading it.", call("read_file", path="a.txt"))`."""
    texts = [p for p in parts if isinstance(p, str)]
    calls = tuple(p for p in parts if not isinstance(p, str))
    if len(texts) + bool(content) > 1:
        raise TypeError("say() takes one text: a string or content=, not both")
    return Reply(
        content=texts[0] if texts else content,
        tool_calls=calls,
        hold_seconds=hold,
        reasoning=reasoning,
        stop=stop,
        chunk_delay=chunk_delay,
    )


def finish(answer: str, content: str = "") -> Reply:
    """The reply that ends the run with `answer` (the builtin `finish` tool)."""
    return say(call("finish", answer=answer), content=content)


Script = list[Reply] | Callable[[int, list[dict[str, Any]]], Reply]


@dataclass
class FakeProvider:
    """Serves `POST /v1/chat/completions` from a script on 127.0.0.1."""

    script: Script
    faults: dict[int, Fault] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    model: str = "fake-model"
    #: what the fake answers to a compaction's summary request (told apart by its prompt)
    summary: str = "Earlier, the agent called tools and read their outputs."
    summaries: list[dict[str, Any]] = field(default_factory=list)
    #: a provider's rate limit, R requests a second; beyond it, 429 with
    #: `Retry-After: retry_after` (None: no limit). `bucket`: a token bucket of R that refills
    #: at R a second, as Anthropic documents its limiter; `window`: at most R in any second
    #: (stricter than any provider documents)
    rate_limit: float | None = None
    rate_shape: Literal["bucket", "window"] = "bucket"
    retry_after: float = 1.0
    #: seconds every answered request takes (a model's latency), beside a reply's own `hold`
    latency: float = 0.0
    #: headers every answered reply carries (a provider stating its token budget, say)
    reply_headers: dict[str, str] = field(default_factory=dict)
    #: when each request was answered (time.monotonic) and how many got a 429
    answered_at: list[float] = field(default_factory=list)
    throttled: int = 0
    refused_at: list[float] = field(default_factory=list)
    #: requests being answered right now, and the most there were at once
    in_flight: int = 0
    most_in_flight: int = 0

    def __post_init__(self) -> None:
        self._window: collections.deque[float] = collections.deque()
        self._tokens: float | None = None  # the bucket, full at the first request
        self._filled = 0.0
        self._attempts: dict[int, int] = {}
        self._lock = threading.Lock()
        self.arrived = threading.Event()
        self._seen = threading.Condition()
        self._connections: set[socket.socket] = set()
        #: connections accepted so far (a client that pools them opens one)
        self.connections_opened = 0
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
        with self._lock:  # kept-alive connections would go on answering: a stopped fake is dead
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    def steps_seen(self) -> list[int]:
        return [_step_of(r["messages"]) for r in self.requests]

    def reply_for(self, body: dict[str, Any], api: str) -> _Answer:
        messages = body.get("messages", [])
        if SUMMARY_MARKER in json.dumps(body.get("system", "")) + json.dumps(messages[:1]):
            self.summaries.append(body)
            turn = Turn(step=0, model=self.model, content=self.summary, input_tokens=100)
            payload = openai_completion(turn) if api == "openai" else anthropic_message(turn)
            return _Answer(200, {}, json.dumps(payload).encode())
        if not self._within_rate():
            error = {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}
            headers = {"retry-after": f"{self.retry_after:g}"}
            return _Answer(429, headers, json.dumps(error).encode())
        step = _step_of(messages)
        with self._lock:
            self.requests.append(body)
            attempt = self._attempts.get(step, 0)
            self._attempts[step] = attempt + 1
        self.arrived.set()
        with self._seen:
            self._seen.notify_all()
        fault = self.faults.get(step)
        stream = bool(body.get("stream"))
        if fault is not None and attempt < fault.times and fault.events:
            return _Answer(200, dict(fault.headers), b"", events=list(fault.events))
        if fault is not None and attempt < fault.times and not fault.cut:
            return _Answer(fault.status, dict(fault.headers), fault.body.encode())
        reply = self._scripted(step, messages)
        turn = Turn(
            step=step,
            model=self.model,
            content=reply.content,
            calls=list(reply.tool_calls),
            reasoning=reply.reasoning,
            stop=reply.stop,
            input_tokens=len(json.dumps(body.get("messages", []))) // 4 + 50,
        )
        hold = (reply.hold_seconds if attempt == 0 else 0.0) + self.latency
        cut = fault is not None and fault.cut and attempt < fault.times
        if stream:
            events: list[tuple[str | None, str]] = (
                [(None, d) for d in openai_chunks(turn)]
                if api == "openai"
                else [(e, d) for e, d in anthropic_events(turn)]
            )
            return _Answer(
                200,
                dict(self.reply_headers),
                b"",
                hold,
                events[: len(events) // 2] if cut else events,
                reply.chunk_delay,
                cut=cut,
            )
        payload = openai_completion(turn) if api == "openai" else anthropic_message(turn)
        return _Answer(200, dict(self.reply_headers), json.dumps(payload).encode(), hold)

    def _within_rate(self) -> bool:
        """Count a request against `rate_limit`: False (a 429) when the last second already
        took that many."""
        now = time.monotonic()
        with self._lock:
            if self.rate_limit is not None and not self._take(now, self.rate_limit):
                self.throttled += 1
                self.refused_at.append(now)
                return False
            self.answered_at.append(now)
        return True

    def _take(self, now: float, rate: float) -> bool:
        capacity = max(rate, 1.0)
        if self.rate_shape == "window":
            while self._window and self._window[0] <= now - 1.0:
                self._window.popleft()
            if len(self._window) >= capacity:
                return False
            self._window.append(now)
            return True
        tokens = capacity if self._tokens is None else self._tokens
        tokens = min(capacity, tokens + (now - self._filled) * rate)
        self._filled = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True

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
        return type("Handler", (_Handler,), {"fake": self})


class _Handler(BaseHTTPRequestHandler):
    """One connection to a `FakeProvider` (bound to it as the class attribute `fake`)."""

    fake: FakeProvider

    # keep-alive, as real providers do (a new connection per call is a cost of the
    # fake, not of its client); SSE replies are chunked, one chunk unless paced
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._lock:
            self.fake._connections.add(self.connection)
            self.fake.connections_opened += 1

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def handle(self) -> None:
        # a client that drops a kept-alive connection is no error of the fake's
        with contextlib.suppress(ConnectionError):
            super().handle()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.endswith("/chat/completions"):
            api = "openai"
        elif self.path.endswith("/v1/messages"):
            api = "anthropic"
        else:
            self.send_error(404)
            return
        fake = self.fake
        with fake._lock:
            fake.in_flight += 1
            fake.most_in_flight = max(fake.most_in_flight, fake.in_flight)
        try:
            answer = fake.reply_for(body, api)
            if answer.hold:
                threading.Event().wait(answer.hold)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if answer.events is not None:
                    self._stream(answer)
                else:
                    self._send(answer)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _send(self, answer: _Answer) -> None:
        self.send_response(answer.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer.data)))
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(answer.data)

    def _stream(self, answer: _Answer) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        for key, value in answer.headers.items():
            self.send_header(key, value)
        events = [
            (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
            for event, data in answer.events or []
        ]
        if answer.cut:  # the body ends early but cleanly: the stream just stops
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write("".join(events).encode())
            self.close_connection = True
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in events if answer.chunk_delay else ["".join(events)]:
            data = chunk.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if answer.chunk_delay:
                threading.Event().wait(answer.chunk_delay)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        return


def _step_of(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


@dataclass
class _Answer:
    status: int
    headers: dict[str, str]
    data: bytes
    hold: float = 0.0
    events: list[tuple[str | None, str]] | None = None
    chunk_delay: float = 0.0
    cut: bool = False
