"""The worker's run cache (`capstan.host.run_cache`): which runs moved when, eviction of the
idle ones, and which departures reset stickiness. Fake instances and a fake clock; the real
path (a dev server, a parked run, its next task on the normal queue) is in
tests/integration/test_run_cache.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from temporalio.bridge.proto.workflow_activation import (
    RemoveFromCache,
    WorkflowActivation,
    WorkflowActivationJob,
)
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.worker import Worker, WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from capstan.host.run_cache import RunCache


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Instance(WorkflowInstance):
    def __init__(self, cache: RunCache | None = None, run_id: str = "") -> None:
        self.activations: list[WorkflowActivation] = []
        self.cache, self.run_id = cache, run_id
        self.active_seen: bool | None = None

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self.activations.append(act)
        if self.cache is not None:  # a sweep in the middle of an activation leaves the run be
            self.cache.evict_idle(0.0)
        return WorkflowActivationCompletion(run_id=act.run_id)

    def get_serialization_context(self, command_info: Any) -> Any:
        return None

    def get_external_store_context(self, command_info: Any) -> Any:
        return None

    def get_info(self) -> Any:
        return None


@dataclass
class _Runner(WorkflowRunner):
    instances: list[_Instance] = field(default_factory=list)
    cache: RunCache | None = None

    def prepare_workflow(self, defn: Any) -> None:
        pass

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        self.instances.append(_Instance(self.cache, det.info.run_id))
        return self.instances[-1]


@dataclass
class _Bridge:
    evicted: list[str] = field(default_factory=list)

    def request_workflow_eviction(self, run_id: str) -> None:
        self.evicted.append(run_id)


@dataclass
class _Worker:
    _bridge_worker: _Bridge = field(default_factory=_Bridge)


@dataclass
class _Service:
    resets: list[tuple[str, str]] = field(default_factory=list)

    async def reset_sticky_task_queue(self, request: Any) -> None:
        self.resets.append((request.execution.workflow_id, request.execution.run_id))


@dataclass
class _Client:
    namespace: str = "default"
    workflow_service: _Service = field(default_factory=_Service)


@dataclass
class _Details:
    info: Any


@dataclass
class _Info:
    run_id: str
    workflow_id: str


def _create(runner: WorkflowRunner, run_id: str) -> WorkflowInstance:
    details = cast(WorkflowInstanceDetails, _Details(_Info(run_id, f"wf-{run_id}")))
    return runner.create_instance(details)


def _job(run_id: str) -> WorkflowActivation:
    return WorkflowActivation(run_id=run_id, jobs=[WorkflowActivationJob()])


def _eviction(run_id: str, reason: RemoveFromCache.EvictionReason.ValueType) -> WorkflowActivation:
    job = WorkflowActivationJob(remove_from_cache=RemoveFromCache(reason=reason))
    return WorkflowActivation(run_id=run_id, jobs=[job])


async def _attached(clock: _Clock) -> tuple[RunCache, WorkflowRunner, _Bridge, _Service]:
    cache = RunCache(clock)
    worker, client = _Worker(), _Client()
    assert cache.attach(cast(Worker, worker), cast(Client, client))
    return cache, cache.runner(_Runner()), worker._bridge_worker, client.workflow_service


async def test_runs_idle_for_the_threshold_are_evicted_once() -> None:
    clock = _Clock()
    cache, runner, bridge, _ = await _attached(clock)
    old, new = _create(runner, "old"), _create(runner, "new")
    clock.now += 50
    new.activate(_job("new"))  # moved 50 s after the other
    clock.now += 20
    assert cache.evict_idle(60.0) == ["old"]
    assert bridge.evicted == ["old"]
    assert cache.evict_idle(60.0) == []  # asked once, not at every sweep
    # the eviction arrives while `release` waits for it
    asyncio.get_running_loop().call_later(
        0.1, old.activate, _eviction("old", RemoveFromCache.LANG_REQUESTED)
    )
    clock.now += 61
    assert await cache.release(60.0, settle=5.0)  # it left: its memory can be collected
    assert bridge.evicted == ["old", "new"]
    assert not await cache.release(60.0, settle=0.2)  # "new" was asked, never left
    assert cache.cached() == 1


async def test_a_run_in_the_middle_of_an_activation_is_not_evicted() -> None:
    cache = RunCache(_Clock())
    runner = _Runner(cache=cache)
    bridge = _Bridge()
    assert cache.attach(cast(Worker, _Worker(bridge)), cast(Client, _Client()))
    tracked = cache.runner(runner)
    instance = _create(tracked, "busy")
    instance.activate(_job("busy"))  # the fake sweeps with idle 0 while it is active
    assert bridge.evicted == []
    cache.evict_idle(0.0)
    assert bridge.evicted == ["busy"]


async def test_a_run_that_moved_after_being_asked_to_leave_is_asked_again_later() -> None:
    clock = _Clock()
    cache, runner, bridge, _ = await _attached(clock)
    run = _create(runner, "r")
    clock.now += 61
    cache.evict_idle(60.0)
    run.activate(_job("r"))  # a task came before core evicted it
    assert cache.evict_idle(60.0) == []  # it just moved
    clock.now += 61
    cache.evict_idle(60.0)
    assert bridge.evicted == ["r", "r"]


@pytest.mark.parametrize(
    ("reason", "unstuck"),
    [
        (RemoveFromCache.CACHE_FULL, True),
        (RemoveFromCache.LANG_REQUESTED, True),
        (RemoveFromCache.UNSPECIFIED, False),  # e.g. the run ended
        (RemoveFromCache.NONDETERMINISM, False),
        (RemoveFromCache.CACHE_MISS, False),
    ],
)
async def test_only_runs_evicted_for_room_are_sent_back_to_the_task_queue(
    reason: RemoveFromCache.EvictionReason.ValueType, unstuck: bool
) -> None:
    cache, runner, _, service = await _attached(_Clock())
    run = _create(runner, "r")
    # the SDK runs activations on its workflow threads
    await asyncio.to_thread(run.activate, _eviction("r", reason))
    for _ in range(5):
        await asyncio.sleep(0)
    assert service.resets == ([("wf-r", "r")] if unstuck else [])
    assert cache.cached() == 0


async def test_every_activation_reaches_the_runs_own_instance() -> None:
    cache = RunCache(_Clock())
    inner = _Runner()
    run = _create(cache.runner(inner), "r")
    activation = _job("r")
    assert run.activate(activation).run_id == "r"
    assert inner.instances[0].activations == [activation]


async def test_without_the_sdk_hook_nothing_is_evicted() -> None:
    cache = RunCache(_Clock())
    assert not cache.attach(cast(Worker, object()), cast(Client, _Client()))
    _create(cache.runner(_Runner()), "r")
    assert cache.evict_idle(0.0) == []  # counts, evicts nothing, raises nothing
    assert not await cache.release(0.0)
    assert cache.cached() == 1


def test_a_run_leaving_after_the_workers_loop_closed_still_leaves() -> None:
    async def attach() -> tuple[RunCache, WorkflowRunner, _Bridge, _Service]:
        return await _attached(_Clock())

    cache, runner, _, service = asyncio.run(attach())  # its loop is closed on return
    run = _create(runner, "r")
    run.activate(_eviction("r", RemoveFromCache.CACHE_FULL))  # no RuntimeError from the loop
    assert cache.cached() == 0
    assert service.resets == []
