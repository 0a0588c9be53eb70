"""Fleet flow control (issue 30) on the real dev server: a profile's rate holds across worker
processes, `capstan limits` changes it at run time, a provider that keeps refusing never fails a
run, a small tenant is not starved by a large one, a high-priority run goes first, and the API
makes the caller's tenant the fairness key.

The provider is a fake on a real socket that allows R requests in any second and answers 429
with Retry-After beyond it (`FakeProvider.rate_limit`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.client.runs import CapstanClient
from capstan.core.models import model_queue
from capstan.core.spec import CAPACITY, ActivityTuning, RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.queue_config import read_limit
from capstan.testing.fake_provider import FakeProvider, Fault, Reply, call, say
from capstan.testing.worker import model_env
from tests.integration.helpers import ROOT, history_events, run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, app_for, auth, served
from tests.integration.test_api_helpers import ROOT as ROOT_TOKEN

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.2, model_heartbeat=2.0, model_capacity_wait=1.0)


def calls(n: int) -> Any:
    """A script of `n` model calls a run: `n - 1` read-only tool turns, then finish."""

    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if step >= n - 1:
            return say(call("finish", answer="done"))
        return say(call("list_files", path="."))

    return script


def limits_file(
    where: Path,
    rate: float | None,
    *,
    concurrency: int | None = None,
    free: FakeProvider | None = None,
) -> Path:
    """A profiles file limiting the `default` profile (and, with `free`, a `free` profile on
    the same fake with no limits, the control)."""
    text = "[limits.default]\n" + (f"requests_per_second = {rate}\n" if rate else "")
    text += f"concurrency = {concurrency}\n" if concurrency else ""
    if free is not None:
        text += (
            f'[profiles.free]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{free.base_url}"\n'
        )
    path = where / "profiles.toml"
    path.write_text(text)
    return path


def start_worker(settings: Settings, fake: FakeProvider, profiles: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **model_env(fake),
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),  # one host's blob store, shared
        "CAPSTAN_PROFILES": str(profiles),
        "PYTHONPATH": str(ROOT),
    }
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with (settings.data_dir / f"worker-{time.monotonic_ns()}.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py")], env=env, cwd=ROOT, stdout=log, stderr=log
        )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


async def until(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.2)


async def run_all(client: CapstanClient, specs: list[RunSpec]) -> list[TerminalReason]:
    ids = [await client.start_run(spec) for spec in specs]
    results = await asyncio.gather(*(client.result(run_id) for run_id in ids))
    return [r.terminal_reason for r in results]


@pytest.mark.slow
async def test_a_profiles_rate_holds_across_two_worker_processes(
    agent: Agent, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """Two worker processes each declare 4 calls a second and 2 at once for `default`: the
    server holds the fleet to 4 a second (not 8) and each worker takes one of the 2, so a
    provider allowing 4 a second rarely pushes back and never sees more than 2 calls at once,
    while the same work on an unlimited profile is refused over and over, many at once.
    `capstan limits` shows, overrides and resets the rate while the workers run."""
    settings = agent.settings
    queue = model_queue(settings.task_queue, "default")
    with FakeProvider(calls(3), rate_limit=4, latency=0.3) as fake:
        profiles = limits_file(tmp_path, 4, concurrency=2, free=fake)
        workers += [start_worker(settings, fake, profiles) for _ in range(2)]

        async def both_polling() -> bool:
            return (await read_limit(agent.temporal, queue)).pollers >= 2

        await until(both_polling)
        await asyncio.sleep(2.5)  # each worker has counted the other (once a second)
        specs = [RunSpec(task=f"paced {i}", max_steps=5, tuning=FAST) for i in range(12)]
        assert await run_all(agent.client, specs) == [TerminalReason.COMPLETED] * 12
        paced_refusals, paced_calls = fake.throttled, len(fake.answered_at)
        paced_at_once, fake.most_in_flight = fake.most_in_flight, 0

        env = {"CAPSTAN_PROFILES": str(profiles)}
        shown = run_cli(settings, "limits", "show", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        (row,) = json.loads(shown.stdout)
        assert (row["profile"], row["rate"], row["source"], row["pollers"]) == (
            "default",
            4.0,
            "workers",
            2,
        )
        assert row["configured"] == {"requests_per_second": 4.0, "concurrency": 2}
        changed = run_cli(settings, "limits", "set", "default", "--rps", "2.5", env=env)
        assert changed.returncode == 0, changed.stderr
        now = await read_limit(agent.temporal, queue)
        assert (now.rate, now.source, now.override) == (2.5, "operator", 2.5)
        unknown = run_cli(settings, "limits", "set", "defualt", "--rps", "1", env=env)
        assert unknown.returncode == 2
        assert "did you mean 'default'" in unknown.stderr and len(unknown.stderr.splitlines()) == 1
        reset = run_cli(settings, "limits", "reset", "default", env=env)
        assert reset.returncode == 0, reset.stderr
        assert (await read_limit(agent.temporal, queue)).source == "workers"

        fake.throttled = 0
        free = [
            RunSpec(task=f"free {i}", model="free", max_steps=5, tuning=FAST) for i in range(12)
        ]
        assert await run_all(agent.client, free) == [TerminalReason.COMPLETED] * 12
        free_refusals, free_at_once = fake.throttled, fake.most_in_flight
    print(f"paced: {paced_refusals} refused of {paced_calls}; free: {free_refusals} refused")
    assert paced_calls >= 36
    # paced: at most the server's first burst is refused; unpaced: far more
    assert paced_refusals <= 12, (paced_refusals, free_refusals)
    assert free_refusals >= 2 * paced_refusals + 6, (paced_refusals, free_refusals)
    assert paced_at_once <= 2, (paced_at_once, free_at_once)
    assert free_at_once >= 4, (paced_at_once, free_at_once)  # unpaced: past the cap


async def test_a_run_the_provider_keeps_refusing_waits_for_capacity(
    agent: Agent, tmp_path: Path
) -> None:
    """429s through every attempt of a limited profile's call: the run waits on a durable
    timer, says so in `status`, and completes once the provider takes calls again (it used to
    end `model_error`). Its calls ran on the profile's own queue; the history is kept for
    replay (`tests/histories/provider_capacity_wait.json`)."""
    refusals = Fault(status=429, headers=(("retry-after", "0.2"),), times=5)
    tuning = ActivityTuning(model_max_attempts=2, model_initial_retry=0.1, model_capacity_wait=1.0)
    env = {"CAPSTAN_PROFILES": str(limits_file(tmp_path, None))}
    async with agent.serving(calls(1), faults={0: refusals}, env=env) as live:
        run_id = await live.client.start_run(RunSpec(task="busy provider", tuning=tuning))
        seen: list[str] = []

        async def says_capacity() -> bool:
            seen.extend((await live.client.status(run_id)).waiting_for)
            return CAPACITY in seen

        await until(says_capacity, timeout=30)
        run = await live.finish(run_id, history="provider_capacity_wait")
        events = await history_events(live.client.handle(run_id))
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    assert run.result.output == "done"
    assert len(live.fake.requests) == 6  # five refused, the sixth answered
    queues = {
        e["activityTaskScheduledEventAttributes"]["taskQueue"]["name"]
        for e in events
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "call_model"
    }
    assert queues == {model_queue(agent.settings.task_queue, "default")}
    assert sum("timerStartedEventAttributes" in e for e in events) >= 2  # two waits


async def _completion_order(client: CapstanClient, runs: dict[str, RunSpec]) -> list[str]:
    order: list[str] = []

    async def one(name: str, spec: RunSpec) -> None:
        run_id = await client.start_run(spec)
        result = await client.result(run_id)
        assert result.terminal_reason is TerminalReason.COMPLETED, result.error
        order.append(name)

    tasks = []
    for name, spec in runs.items():
        tasks.append(asyncio.create_task(one(name, spec)))
        if name == "big-9":  # the small tenant arrives once the big one's backlog is queued
            await asyncio.sleep(1.0)
    await asyncio.gather(*tasks)
    return order


async def test_a_small_tenant_is_not_starved_by_a_large_one(agent: Agent, tmp_path: Path) -> None:
    """The model queue is paced at 2 calls a second; tenant `big` queues 10 runs, tenant
    `small` 2 runs a second later. With fairness the small tenant's calls are dispatched in turn
    with the big one's backlog; first in, first out would finish them last."""
    env = {"CAPSTAN_PROFILES": str(limits_file(tmp_path, 2))}
    runs = {f"big-{i}": RunSpec(task=f"b{i}", fairness_key="big") for i in range(10)}
    runs |= {f"small-{i}": RunSpec(task=f"s{i}", fairness_key="small") for i in range(2)}
    async with agent.serving(calls(1), env=env) as live:
        order = await _completion_order(live.client, runs)
    last_small = max(order.index("small-0"), order.index("small-1"))
    assert last_small <= 7, order  # FIFO: positions 10 and 11


async def test_a_high_priority_run_goes_ahead_of_a_backlog(agent: Agent, tmp_path: Path) -> None:
    """Ten priority-5 runs are queued behind a paced model queue; two priority-1 runs started
    a second later finish before most of them."""
    env = {"CAPSTAN_PROFILES": str(limits_file(tmp_path, 2))}
    runs = {f"big-{i}": RunSpec(task=f"b{i}", priority=5) for i in range(10)}
    runs |= {f"urgent-{i}": RunSpec(task=f"u{i}", priority=1) for i in range(2)}
    async with agent.serving(calls(1), env=env) as live:
        order = await _completion_order(live.client, runs)
    assert max(order.index("urgent-0"), order.index("urgent-1")) <= 5, order


async def test_the_api_makes_the_tenant_the_fairness_key(agent: Agent) -> None:
    """Through the API the caller's tenant is the run's fairness key whatever the body says;
    a token without `admin` may lower its priority, not raise it, nor its weight."""
    async with agent.serving(calls(1)) as live, served(app_for(live.client)) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            body = {"task": "t", "priority": 4, "fairness_key": "someone-else"}
            started = await http.post("/api/runs", json=body, headers=auth(ALICE))
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            for field, value in (("priority", 1), ("fairness_weight", 50.0)):
                refused = await http.post(
                    "/api/runs", json={"task": "t", field: value}, headers=auth(ALICE)
                )
                assert refused.status_code == 403, refused.text
                assert field in refused.json()["error"]["message"], refused.text
            admin = await http.post(
                "/api/runs",
                json={"task": "t", "priority": 1, "fairness_key": "batch-lane"},
                headers=auth(ROOT_TOKEN),
            )
            assert admin.status_code == 201, admin.text
            admin_id = admin.json()["run_id"]
        await live.client.result(run_id)
        mine = (await live.client.describe(run_id)).raw_description.workflow_execution_info
        theirs = (await live.client.describe(admin_id)).raw_description.workflow_execution_info
    assert (mine.priority.priority_key, mine.priority.fairness_key) == (4, "acme")
    assert (theirs.priority.priority_key, theirs.priority.fairness_key) == (1, "batch-lane")


async def test_a_provider_stating_its_token_budget_is_spent_slows_the_fleet(
    agent: Agent, tmp_path: Path
) -> None:
    """A reply whose headers say fewer tokens are left than the call took (OpenAI's
    `x-ratelimit-remaining-tokens`) slows the profile's queue on the server until the stated
    reset, as a 429 would, before the next calls run into one."""
    env = {"CAPSTAN_PROFILES": str(limits_file(tmp_path, 10))}
    queue = model_queue(agent.settings.task_queue, "default")
    with FakeProvider(calls(1)) as fake:
        fake.reply_headers = {
            "x-ratelimit-remaining-tokens": "3",
            "x-ratelimit-reset-tokens": "30s",
        }
        async with agent.serving(fake, env=env) as live:
            result = await live.client.result(await live.client.start_run(RunSpec(task="t")))

            async def slowed() -> bool:
                return (await read_limit(agent.temporal, queue)).source == "paused"

            await until(slowed, timeout=20)
            now = await read_limit(agent.temporal, queue)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert now.pushback is not None and now.pushback.restore is None  # back to the workers'
    assert now.rate == pytest.approx(8.0)  # 0.8 x the declared 10 a second
