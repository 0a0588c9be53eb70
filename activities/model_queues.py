"""Model calls of a limited profile, served on a queue of their own, paced by the server.

A profile with `[limits.NAME]` (`capstan.runtime.provider_limits`) has its `call_model` and
`compact_context` activities on `capstan.core.models.model_queue(task_queue, NAME)`. Each worker
serves that queue beside its main one (`ModelQueues`, a plugin of the main worker, as webhook
deliveries are served) and declares the profile's `requests_per_second` to the server, which
dispatches no faster than that to all workers together. `concurrency` is the fleet's cap on
calls at once, each worker taking its share of it (`FleetShare`).

A provider's 429 slows the whole fleet, not only the call that got it (`Governor`): the worker
that got it lowers the queue's rate on the server (the task queue configuration API) until the
provider's Retry-After has passed, with the time to restore written in the change's reason.
Every worker watches the queue's configuration and restores the rate once that time passed, so
a worker that dies mid-pause holds no one back. The call itself is retried by Temporal after
the Retry-After, through the same paced queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    Plugin,
    ReplayerConfig,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    Worker,
    WorkerConfig,
    WorkerTuner,
)

from capstan.core.errors import ConfigError
from capstan.core.models import model_queue
from capstan.runtime.deployments import versioned
from capstan.runtime.provider_limits import ProviderLimits
from capstan.runtime.queue_config import Pushback, read_limit, write_rate

__all__ = ["FleetShare", "Governor", "ModelQueues"]

log = logging.getLogger("capstan.worker")

#: how often each worker looks whether a pause on a queue it serves has run out
WATCH_INTERVAL = 1.0
#: a 429 without Retry-After pauses the fleet this long
DEFAULT_PAUSE = 1.0
#: at most this long, whatever the provider asks (the call's own retry honours the rest)
MAX_PAUSE = 60.0


@dataclass
class Governor:
    """Slows the fleet on a provider's pushback and restores the pace when it has passed."""

    client: Client
    queues: Mapping[str, str]  # profile -> its model queue
    clock: Callable[[], float] = time.time
    #: until when this worker already paused each profile (no second write for the same 429s)
    _paused_until: dict[str, float] | None = None
    _tasks: set[asyncio.Task[None]] | None = None
    # queue -> (this worker's rank among those polling it, how many), as last read
    _places: dict[str, tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        self._paused_until = {}
        self._tasks = set()
        self._places = {}

    def pushback(self, profile: str, retry_after: float | None) -> None:
        """A call of `profile` got a 429: slow its queue for the whole fleet until the
        provider's Retry-After has passed (from the event loop; the write runs beside the call,
        which goes on to fail and be retried through the slowed queue)."""
        queue = self.queues.get(profile)
        assert self._paused_until is not None and self._tasks is not None
        if queue is None:
            return
        pause = min(max(retry_after or DEFAULT_PAUSE, 0.1), MAX_PAUSE)
        until = self.clock() + pause
        if self._paused_until.get(profile, 0.0) >= until - 0.05:
            return  # this worker already slowed it for as long: one write for a burst of 429s
        self._paused_until[profile] = until
        task = asyncio.get_running_loop().create_task(self._slow(profile, queue, until))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _slow(self, profile: str, queue: str, until: float) -> None:
        try:
            current = await read_limit(self.client, queue)
            if current.pushback is not None:  # slowed already (by any worker): extend it
                slowed = Pushback(
                    max(until, current.pushback.until),
                    current.pushback.restore,
                    current.pushback.rate,
                )
            else:
                slowed = Pushback(until, current.override, Pushback.slowed(current.rate))
            await write_rate(self.client, queue, slowed)
            log.warning(
                "provider of profile %r pushed back (429): its calls slow to %g/s for the whole "
                "fleet for %.1fs",
                profile,
                slowed.rate,
                slowed.until - self.clock(),
            )
            await asyncio.sleep(max(slowed.until - self.clock(), 0.0))
            await self.restore_if_due(queue)
        except (RPCError, ConfigError) as exc:
            assert self._paused_until is not None
            self._paused_until.pop(profile, None)  # the next 429 tries again
            log.warning("could not slow queue %r after a 429: %s", queue, exc)

    async def watch(self, interval: float = WATCH_INTERVAL) -> None:
        """Restore every served queue whose pause has run out, whoever paused it, and count
        the workers polling each (their share of a fleet-wide `concurrency`: `FleetShare`)."""
        said: dict[str, str] = {}  # each queue's last problem, said once until it changes
        while True:
            for queue in self.queues.values():
                try:
                    await self.restore_if_due(queue)
                    said.pop(queue, None)
                except Exception as exc:  # the watch outlives any one failed read
                    if said.get(queue) != str(exc):
                        log.warning("could not read queue %r: %s", queue, exc)
                    said[queue] = str(exc)
            await asyncio.sleep(interval)

    def place(self, queue: str) -> tuple[int, int]:
        """This worker's rank among the workers polling `queue` and how many they are, as
        last read from the server (alone until read)."""
        assert self._places is not None
        return self._places.get(queue, (0, 1))

    def _placed(self, queue: str, identities: tuple[str, ...]) -> None:
        """Where this worker stands by the server's list (not listed yet: last, one more)."""
        assert self._places is not None
        me = self.client.identity
        place = (
            (identities.index(me), len(identities))
            if me in identities
            else (len(identities), len(identities) + 1)
        )
        if self._places.get(queue, (0, 1))[1] != place[1]:
            log.info("queue %r: %d worker(s) share it", queue, place[1])
        self._places[queue] = place

    async def count_workers(self) -> None:
        """Read where this worker stands among those polling each served queue."""
        for queue in self.queues.values():
            with contextlib.suppress(RPCError, ConfigError):
                self._placed(queue, (await read_limit(self.client, queue)).identities)

    async def restore_if_due(self, queue: str) -> bool:
        """Give `queue` back its rate when its pause has run out. True when it did."""
        current = await read_limit(self.client, queue)
        self._placed(queue, current.identities)
        if current.pushback is None or current.pushback.until > self.clock():
            return False
        await write_rate(self.client, queue, current.pushback.restore)
        log.info("queue %r: provider pause over, pace restored", queue)
        return True

    async def aclose(self) -> None:
        assert self._tasks is not None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class FleetShare(CustomSlotSupplier):
    """A worker's share of a profile's fleet-wide `concurrency`: the cap divided among the
    workers polling its queue as the server lists them, the remainder to the first in the
    list's order, so the shares add up to the cap (at least 1 each). The server has no
    concurrency limit of its own; its list of pollers is what the workers agree on. The share
    follows the list within a `WATCH_INTERVAL`, so the fleet may exceed the cap that long
    after a worker joins. `place()`: this worker's rank in the list and its length."""

    def __init__(self, cap: int, place: Callable[[], tuple[int, int]], poll: float = 0.02) -> None:
        self.cap = cap
        self.place = place
        self.poll = poll
        self.held = 0  # permits out, used or not
        # permits out but not yet used (held by a poll, which may wait a minute for a task): at
        # most one, so a worker that took its share while it was alone, and then learns of
        # others, runs no more than its new share
        self.idle = 0
        self._lock = threading.Lock()  # the SDK may release from another thread

    def share(self) -> int:
        rank, workers = self.place()
        workers = max(workers, 1)
        return max(self.cap // workers + (1 if rank < self.cap % workers else 0), 1)

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        # polled, not awaited on an event: the share also moves when the server's list of
        # pollers does, and the SDK may release a permit from another thread
        while (permit := self.try_reserve_slot(ctx)) is None:  # noqa: ASYNC110
            await asyncio.sleep(self.poll)
        return permit

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        with self._lock:
            if self.held >= self.share() or self.idle:
                return None
            self.held += 1
            self.idle += 1
        return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        with self._lock:
            self.idle = max(self.idle - 1, 0)

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            self.held = max(self.held - 1, 0)
            if ctx.slot_info is None:  # never used: its poll ended without a task
                self.idle = max(self.idle - 1, 0)


class ModelQueues(Plugin):
    """Serves the model queues of the limited profiles beside the worker it is a plugin of,
    for as long as that worker runs, with its client, build id, interceptors and grace."""

    def __init__(
        self,
        limits: Mapping[str, ProviderLimits],
        activities: Sequence[Callable[..., Any]],
        on_governor: Callable[[Governor], None] | None = None,
    ) -> None:
        self.limits = dict(limits)
        self.activities = list(activities)
        self.on_governor = on_governor

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        return config

    def run_replayer(self, replayer: Any, histories: Any, next: Any) -> Any:
        return next(replayer, histories)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        queues = {name: model_queue(worker.task_queue, name) for name in self.limits}
        governor = Governor(worker.client, queues)
        await governor.count_workers()
        workers = [
            self._worker(worker, governor, queues[name], lim) for name, lim in self.limits.items()
        ]
        if self.on_governor is not None:
            self.on_governor(governor)
        watching = asyncio.create_task(governor.watch())
        try:
            async with contextlib.AsyncExitStack() as stack:
                for served in workers:
                    await stack.enter_async_context(served)
                await next(worker)
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await governor.aclose()

    def _worker(
        self, main: Worker, governor: Governor, queue: str, limits: ProviderLimits
    ) -> Worker:
        config = main.config()
        options: dict[str, Any] = {
            **versioned(config),
            "graceful_shutdown_timeout": config.get("graceful_shutdown_timeout") or timedelta(),
            "max_heartbeat_throttle_interval": config.get(
                "max_heartbeat_throttle_interval", timedelta(seconds=1)
            ),
            "interceptors": config.get("interceptors") or [],
        }
        if limits.requests_per_second is not None:
            # declared by every worker; the server enforces it across all of them
            options["max_task_queue_activities_per_second"] = limits.requests_per_second
        if limits.concurrency is not None:  # the fleet's cap, shared among its workers
            fixed = FixedSizeSlotSupplier(1)  # no workflows, local activities or Nexus here
            options["tuner"] = WorkerTuner.create_composite(
                workflow_supplier=fixed,
                activity_supplier=FleetShare(limits.concurrency, lambda: governor.place(queue)),
                local_activity_supplier=fixed,
                nexus_supplier=fixed,
            )
            options["max_concurrent_activity_task_polls"] = 1  # FleetShare lends one at a time
        return Worker(main.client, task_queue=queue, activities=self.activities, **options)
