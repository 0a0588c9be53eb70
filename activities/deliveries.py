"""How webhook deliveries are kept apart from run work: their own queue, slots, connections
and bounds.

A hook is someone else's server: it may never answer, answer forever, or echo what it was sent.
So a delivery (one `notify_request`):

- runs on its own task queue (`capstan.core.notifications.delivery_queue`), polled by a
  second worker in the same process (`DeliveryWorker`, a plugin of the main one) with
  `MAX_CONCURRENT` activity slots of its own: hanging hooks fill those, never the slots a
  run's model and tool calls need;
- posts through its own connection pool (`delivery_transport`), never the model client's, and
  through the transport itself, so no client logs the request line (the URL);
- has one deadline for all of it, connect, write and read (`post`), and reads at most
  `MAX_RESPONSE_BYTES` of the answer before it closes the connection;
- runs with a `Scrubber` of the hook's secret and URL tokens installed (`scrubbing`), which the
  HTTP libraries' log records pass through (`ScrubbingFilter`).

Never raises anything from `post` but `httpx.HTTPError` and `TimeoutError`; never logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from temporalio.worker import Plugin, ReplayerConfig, Worker, WorkerConfig

from capstan.activities.providers.secrets import Scrubber
from capstan.core.notifications import delivery_queue
from capstan.runtime.deployments import versioned

__all__ = [
    "MAX_CONCURRENT",
    "MAX_RESPONSE_BYTES",
    "Answer",
    "DeliveryWorker",
    "ScrubbingFilter",
    "delivery_transport",
    "post",
    "scrubbing",
]

#: deliveries in flight per worker; the rest wait on the server, not in a run's slots
MAX_CONCURRENT = 32
#: what is read of a hook's answer at most (its status and headers are what count)
MAX_RESPONSE_BYTES = 4 * 1024
#: the loggers of the HTTP stack a delivery goes through
HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2")

_scrubber: contextvars.ContextVar[Scrubber | None] = contextvars.ContextVar(
    "capstan_delivery_scrubber", default=None
)


@dataclass(frozen=True)
class Answer:
    """What a hook answered: its status and its `Retry-After`, if any."""

    status: int
    retry_after: str | None = None


def delivery_transport() -> httpx.AsyncHTTPTransport:
    """The deliveries' own connection pool: no redirects, no cookies, nothing shared."""
    return httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=4 * MAX_CONCURRENT, max_keepalive_connections=8)
    )


async def post(
    transport: httpx.AsyncBaseTransport, request: httpx.Request, seconds: float
) -> Answer:
    """Send `request` and read at most `MAX_RESPONSE_BYTES` of the answer, all within
    `seconds`; `TimeoutError` past it."""
    async with asyncio.timeout(seconds):
        response = await transport.handle_async_request(request)
        try:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= MAX_RESPONSE_BYTES:
                    break  # closing a half-read answer drops its connection
        finally:
            await response.aclose()
    return Answer(response.status_code, response.headers.get("retry-after"))


@contextlib.contextmanager
def scrubbing(scrubber: Scrubber) -> Iterator[None]:
    """Log records of the HTTP stack made inside the block are scrubbed by `scrubber`."""
    token = _scrubber.set(scrubber)
    try:
        yield
    finally:
        _scrubber.reset(token)


class ScrubbingFilter(logging.Filter):
    """Rewrites a record made during a delivery with the delivery's secrets redacted (a
    filter runs in the task that logs, so it sees that task's `scrubbing`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        scrubber = _scrubber.get()
        if scrubber is not None:
            record.msg = scrubber.text(record.getMessage())
            record.args = None
        return True


class DeliveryWorker(Plugin):
    """Runs `notify_request` on the deliveries' queue beside the worker it is a plugin of, for
    as long as that worker runs, with the worker's client, build id and shutdown grace."""

    def __init__(
        self, activity: Callable[..., Any], transport: httpx.AsyncBaseTransport | None
    ) -> None:
        self.activity = activity
        self.transport = transport
        self.filter = ScrubbingFilter()

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        return config

    def run_replayer(self, replayer: Any, histories: Any, next: Any) -> Any:
        return next(replayer, histories)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        config = worker.config()
        deliveries = Worker(
            worker.client,
            task_queue=delivery_queue(worker.task_queue),
            activities=[self.activity],
            max_concurrent_activities=MAX_CONCURRENT,
            max_concurrent_activity_task_polls=2,
            **versioned(config),
            graceful_shutdown_timeout=config.get("graceful_shutdown_timeout") or timedelta(),
            max_heartbeat_throttle_interval=config.get(
                "max_heartbeat_throttle_interval", timedelta(seconds=1)
            ),
        )
        loggers = [logging.getLogger(name) for name in HTTP_LOGGERS]
        for logger in loggers:
            logger.addFilter(self.filter)
        try:
            async with deliveries:
                await next(worker)
        finally:
            for logger in loggers:
                logger.removeFilter(self.filter)
            if self.transport is not None:
                await self.transport.aclose()
