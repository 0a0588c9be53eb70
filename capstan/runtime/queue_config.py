"""A model queue's rate on the Temporal server: read it, set it, pause it (`capstan limits`).

Three sources set the rate the server enforces on a queue, most specific first:

- a pause after a provider's 429 (`Pushback`), written by a worker with the time it ends and
  the rate to restore in its reason (`capstan.activities.model_queues.Governor`);
- an operator's override (`capstan limits set`), the task queue configuration API;
- what the workers polling it declare (`[limits.NAME] requests_per_second`).

The first two are both the configuration API's queue rate limit; the reason tells them apart.
Shared by workers and clients: Temporal's API only, no activity code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from temporalio.api.enums.v1 import RateLimitSource, TaskQueueType
from temporalio.api.taskqueue.v1 import RateLimit, TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    UpdateTaskQueueConfigRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from capstan.core.errors import ConfigError

__all__ = [
    "PUSHBACK_FACTOR",
    "PUSHBACK_PREFIX",
    "Pushback",
    "QueueLimit",
    "read_limit",
    "write_rate",
]

#: the reason of a slow-down a worker wrote after a provider's 429
PUSHBACK_PREFIX = "capstan: provider pushback"
#: a queue slowed after a 429 runs at this share of its rate until the Retry-After has passed
PUSHBACK_FACTOR = 0.8
#: and never slower than this (a queue with no rate of its own is slowed to it)
PUSHBACK_FLOOR_RPS = 0.5
_NUMBER = r"[0-9.]+(?:[eE][-+]?[0-9]+)?"
_PUSHBACK = re.compile(
    re.escape(PUSHBACK_PREFIX)
    + rf" until=(?P<until>{_NUMBER}) restore=(?P<restore>{_NUMBER}|workers)"
    + rf"(?: rate=(?P<rate>{_NUMBER}))?"
)
_ACTIVITY = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
Source = Literal["paused", "operator", "workers", "server"]
_SOURCES: dict[int, Source] = {
    RateLimitSource.RATE_LIMIT_SOURCE_API: "operator",
    RateLimitSource.RATE_LIMIT_SOURCE_WORKER: "workers",
    RateLimitSource.RATE_LIMIT_SOURCE_SYSTEM: "server",
}


@dataclass(frozen=True)
class Pushback:
    """A slow-down to `rate` until when (seconds since the epoch), then back to `restore`
    (None: what the workers declare)."""

    until: float
    restore: float | None
    rate: float = PUSHBACK_FLOOR_RPS

    def reason(self) -> str:
        # repr: the exact float back (`:g` would round it, and may write an exponent)
        restore = "workers" if self.restore is None else repr(float(self.restore))
        return (
            f"{PUSHBACK_PREFIX} until={self.until:.3f} restore={restore} rate={float(self.rate)!r}"
        )

    @classmethod
    def parse(cls, reason: str) -> Pushback | None:
        match = _PUSHBACK.fullmatch(reason.strip())
        if match is None:
            return None
        restore, rate = match["restore"], match["rate"]
        return cls(
            float(match["until"]),
            None if restore == "workers" else float(restore),
            PUSHBACK_FLOOR_RPS if rate is None else float(rate),
        )

    @staticmethod
    def slowed(rate: float | None) -> float:
        """The rate a queue running at `rate` (None: unlimited) is slowed to."""
        if rate is None:
            return PUSHBACK_FLOOR_RPS
        return max(rate * PUSHBACK_FACTOR, min(rate, PUSHBACK_FLOOR_RPS))


@dataclass(frozen=True)
class QueueLimit:
    """What the server enforces on one model queue, and why."""

    queue: str
    #: calls a second the server dispatches now (None: no limit)
    rate: float | None
    source: Source
    #: an operator's rate (`capstan limits set`), if one is set and not paused over
    override: float | None = None
    pushback: Pushback | None = None
    reason: str = ""
    pollers: int = 0
    #: the identities of the workers polling it, sorted: where each stands in a shared cap
    identities: tuple[str, ...] = ()


async def read_limit(client: Client, queue: str) -> QueueLimit:
    """The rate `queue` has on the server. `ConfigError` when the server has no task queue
    configuration API (Temporal server 1.28 and later have it)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=_ACTIVITY,
        report_config=True,
    )
    try:
        answer = await client.workflow_service.describe_task_queue(request)
    except RPCError as exc:
        raise _unsupported(exc) from None
    configured = answer.config.queue_rate_limit if answer.HasField("config") else None
    reason = configured.metadata.reason if configured is not None else ""
    has_rate = configured is not None and configured.HasField("rate_limit")
    api_rate = configured.rate_limit.requests_per_second if configured and has_rate else None
    pushback = Pushback.parse(reason) if has_rate else None
    if pushback is not None and api_rate is not None:  # what the server holds, whoever wrote it
        pushback = Pushback(pushback.until, pushback.restore, api_rate)
    effective = answer.effective_rate_limit if answer.HasField("effective_rate_limit") else None
    source = _SOURCES.get(effective.rate_limit_source, "server") if effective else "server"
    rate: float | None = effective.requests_per_second if effective else None
    if source == "server":
        rate = None  # the server's own default: no limit Capstan set
    if pushback is not None:
        source = "paused"
    return QueueLimit(
        queue=queue,
        rate=rate,
        source=source,
        override=None if pushback is not None else api_rate,
        pushback=pushback,
        reason=reason,
        pollers=len(answer.pollers),
        identities=tuple(sorted(p.identity for p in answer.pollers)),
    )


async def write_rate(
    client: Client,
    queue: str,
    rate: float | Pushback | None,
    *,
    reason: str = "capstan limits set",
    identity: str = "capstan",
) -> None:
    """Set `queue`'s rate on the server: a number (an operator's), a `Pushback` (a pause), or
    None (give the queue back to what its workers declare)."""
    update = UpdateTaskQueueConfigRequest.RateLimitUpdate()
    if isinstance(rate, Pushback):
        update.rate_limit.CopyFrom(RateLimit(requests_per_second=rate.rate))
        update.reason = rate.reason()
    elif rate is not None:
        update.rate_limit.CopyFrom(RateLimit(requests_per_second=rate))
        update.reason = reason
    else:
        update.reason = "capstan limits reset"
    request = UpdateTaskQueueConfigRequest(
        namespace=client.namespace,
        identity=identity,
        task_queue=queue,
        task_queue_type=_ACTIVITY,
        update_queue_rate_limit=update,
    )
    try:
        await client.workflow_service.update_task_queue_config(request)
    except RPCError as exc:
        raise _unsupported(exc) from None


def _unsupported(exc: RPCError) -> Exception:
    if exc.status == RPCStatusCode.PERMISSION_DENIED:
        return ConfigError(f"not allowed to read or set task queue rate limits: {exc.message}")
    if exc.status == RPCStatusCode.UNIMPLEMENTED:
        return ConfigError(
            "this Temporal server cannot set task queue rate limits "
            f"({exc.message}); provider limits need Temporal server 1.28 or later with the task "
            "queue configuration API enabled"
        )
    return exc
