"""The worker's cache of runs: which runs it holds, and letting go of those that stopped moving.

Temporal's worker keeps each run it works on in memory (up to `max_cached_workflows`), so the
run's next workflow task does not replay its history. A run that waits for a person stops moving
for minutes or days and keeps its place all the same, until the cache is full and the SDK evicts
its least recently used run to make room for another. Measured on the parked-runs bench
(`bench/parked.py`, 1,000 runs waiting for approval, cache 128), that cost twice:

- the decision for an evicted run waited for the eviction of another run (to make room: ~1 ms
  of executor hop and core handshake) and for a history fetch (the server still sent the task
  to this worker's sticky queue with only the new events, so core asked for the rest);
- each cached parked run held ~150 KB that a run doing nothing does not need.

So `RunCache` (a `WorkflowRunner` wrapper, `runner`) knows when each run last moved, and:

1. `release(idle)` evicts the runs that have not been activated for `idle` seconds
   (`CAPSTAN_IDLE_RELEASE`, the same setting as the worker's other idle memory), through the
   SDK core's own `request_workflow_eviction`: the cache holds moving runs and keeps room;
2. every run that leaves the cache for room (the SDK's LRU or 1.) has its stickiness reset
   (`ResetStickyTaskQueue`), so its next task goes to the task queue with its whole history:
   no fetch, and any worker of the queue may take it.

This module must never fail the worker or a run: the SDK attributes it needs are checked when
the worker is attached, and without them it does nothing (logged at debug). It holds no run
logic: evicting a run changes where its state lives, never what the run does (a replay of the
same history yields the same state).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.bridge.proto.workflow_activation import RemoveFromCache, WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import (
    Worker,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)

__all__ = ["RunCache"]

log = logging.getLogger(__name__)

#: why a run left the cache, when its next task is better sent to the task queue than to this
#: worker's sticky queue (it was evicted for room, not because it ended or failed)
_FOR_ROOM = frozenset({RemoveFromCache.CACHE_FULL, RemoveFromCache.LANG_REQUESTED})
#: seconds between looks while evicted runs are leaving
_SETTLE_POLL = 0.05


class RunCache:
    """When each cached run last moved; evicts the idle ones and unsticks what leaves for room.

    Example (what `worker.run_worker` does)::

        cache = RunCache()
        worker = Worker(client, ..., workflow_runner=cache.runner(UnsandboxedWorkflowRunner()))
        cache.attach(worker, client)
        ...
        await cache.release(60.0)  # from capstan.host.memory.release_when_idle
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # activations run on the SDK's workflow threads
        self._moved: dict[str, float] = {}  # run id -> when its last activation ended
        self._active: set[str] = set()  # runs with an activation in flight
        self._evicting: set[str] = set()  # asked to leave, not gone yet
        self._left = 0  # runs that left the cache since the last `release`
        self._evict: Callable[[str], None] | None = None
        self._unstick: Callable[[str, str], Awaitable[None]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def runner(self, inner: WorkflowRunner) -> WorkflowRunner:
        """`inner`, with every run it creates reporting its activations here."""
        return _TrackingRunner(inner, self)

    def attach(self, worker: Worker, client: Client) -> bool:
        """Bind eviction to `worker`'s core and unsticking to `client`; call from the event
        loop. False (and the cache only counts) when this SDK lacks what eviction needs."""
        bridge = getattr(worker, "_bridge_worker", None)
        evict = getattr(bridge, "request_workflow_eviction", None)
        if not callable(evict):
            log.debug("the SDK's worker has no request_workflow_eviction: idle runs stay cached")
            return False
        self._evict = evict
        self._unstick = _unsticker(client)
        self._loop = asyncio.get_running_loop()
        return True

    def cached(self) -> int:
        """Runs this cache has seen created and not yet leave."""
        with self._lock:
            return len(self._moved)

    def evict_idle(self, idle: float) -> list[str]:
        """Ask core to evict every run not activated for `idle` seconds (once each; a run in
        the middle of an activation is left be); the runs asked."""
        now = self._clock()
        with self._lock:
            skip = self._active | self._evicting
            stale = [
                run_id
                for run_id, moved in self._moved.items()
                if now - moved >= idle and run_id not in skip
            ]
            if self._evict is not None:
                self._evicting.update(stale)
        if self._evict is None:
            return []
        for run_id in stale:
            self._evict(run_id)  # core sends the eviction once any task in flight is done
        if stale:
            log.debug("evicting %d runs idle for %gs", len(stale), idle)
        return stale

    async def release(self, idle: float, *, settle: float = 5.0) -> bool:
        """`evict_idle`, then wait (up to `settle` seconds) for those runs to leave; True when
        runs left the cache since the last call, so their memory is free to collect."""
        if self.evict_idle(idle):
            for _ in range(int(settle / _SETTLE_POLL)):
                with self._lock:
                    if not self._evicting:
                        break
                await asyncio.sleep(_SETTLE_POLL)
        with self._lock:
            left, self._left = self._left, 0
        return left > 0

    def _created(self, run_id: str) -> None:
        with self._lock:
            self._moved[run_id] = self._clock()

    def _begin(self, run_id: str) -> None:
        with self._lock:
            self._active.add(run_id)

    def _end(self, run_id: str) -> None:
        with self._lock:
            self._active.discard(run_id)
            self._evicting.discard(run_id)  # it moved: a request still queued in core stands
            self._moved[run_id] = self._clock()

    def _gone(
        self, run_id: str, workflow_id: str, reason: RemoveFromCache.EvictionReason.ValueType
    ) -> None:
        with self._lock:
            self._moved.pop(run_id, None)
            self._active.discard(run_id)
            self._evicting.discard(run_id)
            self._left += 1
        if reason in _FOR_ROOM and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._spawn_unstick, workflow_id, run_id)
            except RuntimeError:  # the worker's loop is closed: nobody will wake the run here
                log.debug("no loop to reset stickiness of %s", run_id)

    def _spawn_unstick(self, workflow_id: str, run_id: str) -> None:
        if self._unstick is None:
            return
        task = asyncio.ensure_future(self._unstick(workflow_id, run_id))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


def _unsticker(client: Client) -> Callable[[str, str], Awaitable[None]]:
    async def unstick(workflow_id: str, run_id: str) -> None:
        request = ResetStickyTaskQueueRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        )
        try:
            await client.workflow_service.reset_sticky_task_queue(request)
        except RPCError as exc:  # the run ended meanwhile, or the server is away: no harm
            log.debug("could not reset stickiness of %s: %s", run_id, exc.message)

    return unstick


def _eviction(act: WorkflowActivation) -> RemoveFromCache | None:
    for job in act.jobs:
        if job.HasField("remove_from_cache"):
            return job.remove_from_cache
    return None


class _TrackingRunner(WorkflowRunner):
    def __init__(self, inner: WorkflowRunner, cache: RunCache) -> None:
        self._inner = inner
        self._cache = cache

    def prepare_workflow(self, defn: Any) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = self._inner.create_instance(det)
        self._cache._created(det.info.run_id)
        return _TrackedInstance(instance, det.info.run_id, det.info.workflow_id, self._cache)

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


class _TrackedInstance(WorkflowInstance):
    def __init__(
        self, inner: WorkflowInstance, run_id: str, workflow_id: str, cache: RunCache
    ) -> None:
        self._inner = inner
        self._run_id = run_id
        self._workflow_id = workflow_id
        self._cache = cache

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        eviction = _eviction(act)
        if eviction is not None:
            try:
                return self._inner.activate(act)
            finally:
                self._cache._gone(self._run_id, self._workflow_id, eviction.reason)
        self._cache._begin(self._run_id)
        try:
            return self._inner.activate(act)
        finally:
            self._cache._end(self._run_id)

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()
