"""Worker Deployments (issue 31) with real worker processes on the dev server: build v1 parks
runs for approval; build v2, whose workflow code makes an incompatible change without a patch
(`tests/versioned_worker.py`: a timer before each execution's first step), is promoted; new
runs start on v2; the parked runs' decisions are served by v1, and they move to v2 at their next
continue-as-new; v1 drains and its worker stops; no run fails replay. The same steps with
versioning off show the failure this prevents."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.deployments import describe_deployment
from capstan.testing.fake_provider import FakeProvider, Reply, call, say
from capstan.testing.worker import model_env
from tests.integration.helpers import ROOT, chain_events, run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending

pytestmark = [pytest.mark.server, pytest.mark.slow]


def two_approvals(step: int, messages: list[dict[str, Any]]) -> Reply:
    """Two writes, each asking a person (a continue-as-new before each wait), then finish."""
    if step == 0:
        return say(call("write_file", path="one.txt", content="1"))
    if step == 1:
        return say(call("write_file", path="two.txt", content="2"))
    return say(call("finish", answer="done"))


def start_worker(
    settings: Settings, fake: FakeProvider, build: str, deployment: str | None, module: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **model_env(fake),
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_BUILD_ID": build,
        "PYTHONPATH": str(ROOT),
    }
    if deployment is not None:
        env["CAPSTAN_DEPLOYMENT"] = deployment
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", module] if module != "worker" else [sys.executable, "worker.py"]
    with (settings.data_dir / f"worker-{build}.log").open("ab") as log:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=log)


@pytest.fixture
def workers() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started: dict[str, subprocess.Popen[bytes]] = {}
    yield started
    for process in started.values():
        if process.poll() is None:
            process.terminate()
    for process in started.values():
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


async def until(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(1.0)  # the server rate-limits a deployment's requests


async def pinned_build(client: CapstanClient, run_id: str) -> str:
    """The build the run's current execution is pinned to."""
    info = (await client.describe(run_id)).raw_description.workflow_execution_info
    return str(info.versioning_info.deployment_version.build_id)


async def approve_next(client: CapstanClient, run_id: str) -> None:
    pending = await wait_pending(client, run_id, timeout=60)
    await client.decide(run_id, "approve", pending.approvals[0].request_id)


async def task_failures(agent: Agent, run_id: str) -> list[str]:
    events = await chain_events(agent.temporal, run_id)
    return [
        str(e["workflowTaskFailedEventAttributes"].get("failure", {}).get("message", ""))
        for e in events
        if "workflowTaskFailedEventAttributes" in e
    ]


async def test_a_new_build_takes_new_runs_and_parked_runs_move_at_their_next_execution(
    agent: Agent, workers: dict[str, subprocess.Popen[bytes]]
) -> None:
    settings, client = agent.settings, agent.client
    deployment = f"dep-{uuid.uuid4().hex[:8]}"
    env = {"CAPSTAN_DEPLOYMENT": deployment}
    with FakeProvider(two_approvals) as fake:
        workers["v1"] = start_worker(settings, fake, "v1", deployment, "worker")

        async def v1_current() -> bool:
            try:
                view = await describe_deployment(agent.temporal, deployment, settings.task_queue)
            except Exception:
                return False
            return view.current == "v1"

        await until(v1_current)  # the first build of a deployment makes itself current
        parked = [await client.start_run(RunSpec(task=f"parked {i}")) for i in range(2)]
        for run_id in parked:
            await wait_pending(client, run_id, timeout=60)
            assert await pinned_build(client, run_id) == "v1"

        workers["v2"] = start_worker(settings, fake, "v2", deployment, "tests.versioned_worker")

        async def v2_known() -> bool:
            view = await describe_deployment(agent.temporal, deployment, settings.task_queue)
            return "v2" in {v.build_id for v in view.versions}

        await until(v2_known)
        unknown = run_cli(settings, "deploy", "promote", "v3", env=env)
        assert unknown.returncode == 2 and "has no build 'v3'" in unknown.stderr
        promoted = run_cli(settings, "deploy", "promote", "v2", env=env)
        assert promoted.returncode == 0, promoted.stderr
        current = run_cli(settings, "deploy", "drain", "v2", env=env)
        assert current.returncode == 2 and "current version" in current.stderr

        unversioned = start_worker(settings, fake, "v9", None, "worker")
        assert unversioned.wait(timeout=60) == 2  # one line, at start: it would get no task
        log = (settings.data_dir / "worker-v9.log").read_text()
        assert f"set CAPSTAN_DEPLOYMENT={deployment}" in log and "Traceback" not in log

        fresh = await client.start_run(RunSpec(task="fresh"))
        await wait_pending(client, fresh, timeout=60)
        assert await pinned_build(client, fresh) == "v2"

        for run_id in parked:  # decided on v1, then the next execution starts on v2
            await approve_next(client, run_id)
        for run_id in parked:

            async def moved(run_id: str = run_id) -> bool:
                pending = await client.pending(run_id)
                return bool(pending.approvals) and await pinned_build(client, run_id) == "v2"

            await until(moved)
        draining = run_cli(settings, "deploy", "drain", "v1", env=env)
        assert draining.returncode in (0, 1), draining.stderr  # 1: runs still pinned to it
        status = run_cli(settings, "deploy", "status", env=env)
        assert status.returncode == 0 and "v2: current" in status.stdout, status.stdout

        async def v1_drained() -> bool:
            drain = run_cli(settings, "deploy", "drain", "v1", env=env)
            return drain.returncode == 0

        await until(v1_drained)
        workers["v1"].terminate()
        workers["v1"].wait(timeout=30)
        for run_id in [*parked, fresh]:
            while (await client.pending(run_id)).approvals:
                await approve_next(client, run_id)
                await asyncio.sleep(0.5)
        results = [await client.result(run_id) for run_id in [*parked, fresh]]
        failures = [f for run_id in [*parked, fresh] for f in await task_failures(agent, run_id)]
    assert [r.terminal_reason for r in results] == [TerminalReason.COMPLETED] * 3
    assert failures == []  # no workflow task failed: nothing replayed on the wrong build


async def test_without_versioning_the_same_change_fails_a_parked_run(
    agent: Agent, workers: dict[str, subprocess.Popen[bytes]]
) -> None:
    """A rolling deploy with versioning off: the parked run's next decision is replayed by the
    new build, whose extra timer does not match the history (what pinning prevents)."""
    settings, client = agent.settings, agent.client
    with FakeProvider(two_approvals) as fake:
        workers["v1"] = start_worker(settings, fake, "v1", None, "worker")
        run_id = await client.start_run(RunSpec(task="parked"))
        await wait_pending(client, run_id, timeout=60)
        workers["v1"].terminate()
        workers["v1"].wait(timeout=30)
        workers["v2"] = start_worker(settings, fake, "v2", None, "tests.versioned_worker")
        await approve_next(client, run_id)

        async def failed() -> list[str]:
            return await task_failures(agent, run_id)

        failures = await until(failed)
    assert any("nondetermin" in f.lower() for f in failures), failures
