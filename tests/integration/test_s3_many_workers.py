"""Scale-out: three worker processes (each with its own data directory, as on separate hosts)
share one Temporal server and one S3 store; 30 runs with a side-effecting tool, an approval and
a live message each; one worker is SIGKILLed mid-way. Every run completes, every effect happens
exactly once (counted through the tool's idempotency-key ledger), no approval or message is lost.

Separate processes, not network namespaces: `ip netns` works here as root, but the session's
Temporal, S3 and model servers listen on loopback only, which another namespace cannot reach.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from capstan.audit.history import load_histories
from capstan.client.transcript import build_transcript
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.conftest import S3Server
from tests.integration.helpers import ROOT, model_env
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

RUNS = 30
TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.2)
SCRIPT = [
    say(call("append_line", path="effects.txt", line="effect", linger=0.5)),
    say(call("shout", text="after the message")),
    say(call("finish", answer="done")),
]


def start_worker(
    settings: Settings, host: str, fake: FakeProvider, s3: S3Server
) -> subprocess.Popen[bytes]:
    """`python worker.py` as a host would run it: its own data dir, the shared store."""
    data_dir = settings.data_dir / host
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **model_env(fake),
        **s3.env(),
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(data_dir),
        "CAPSTAN_WORKSPACE": str(settings.workspace_dir),  # the world the tools change
        "CAPSTAN_BLOB_URL": settings.blob_url or "",
        "CAPSTAN_TOOLS": "tests.sample_tools",
        "PYTHONPATH": str(ROOT),
    }
    with (data_dir / "worker.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py")], env=env, cwd=ROOT, stdout=log, stderr=log
        )


async def pollers(agent: Agent) -> set[str]:
    """The identities polling the test's task queue for workflow tasks."""
    request = DescribeTaskQueueRequest(
        namespace=agent.temporal.namespace,
        task_queue=TaskQueue(name=agent.settings.task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    response = await agent.temporal.workflow_service.describe_task_queue(request)
    return {p.identity for p in response.pollers}


async def steer(agent: Agent, run_id: str, approved: asyncio.Queue[str]) -> None:
    """Send the run its message, then approve its tool call.

    The decision names the request seen (as an inbox does) rather than asking the run again: a
    query can be answered by a worker from a task it had not completed when it was killed, and
    until another worker takes that task over the run shows no open request. The request id
    and hash are the same after the takeover (run, step and call), so the decision still binds.
    """
    (request,) = (await wait_pending(agent.client, run_id, timeout=120)).approvals
    await agent.client.send_message(run_id, f"note for {run_id}", message_id=f"m-{run_id}")
    await agent.client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
    approved.put_nowait(run_id)


async def test_thirty_runs_three_workers_one_killed(
    agent: Agent, workspace: Path, s3_server: S3Server, s3_bucket: str
) -> None:
    agent.configure(blob_url=f"s3://{s3_bucket}/fleet", s3=s3_server.access)
    spec = RunSpec(task="append, then shout", tuning=TUNING, allowed_tools=("append_line", "shout"))
    with FakeProvider(SCRIPT) as fake:
        workers = [start_worker(agent.settings, f"host{i}", fake, s3_server) for i in range(3)]
        try:
            pids = {str(w.pid) for w in workers}  # the default identity is pid@host
            await wait_for(
                lambda: pollers(agent), lambda seen: {i.split("@")[0] for i in seen} >= pids, 60
            )
            ids = [await agent.client.start_run(spec) for _ in range(RUNS)]
            approved: asyncio.Queue[str] = asyncio.Queue()
            steering = [asyncio.create_task(steer(agent, run_id, approved)) for run_id in ids]
            for _ in range(RUNS // 2):
                await asyncio.wait_for(approved.get(), 120)
            workers[0].send_signal(signal.SIGKILL)  # mid-way: tools and model calls in flight
            workers[0].wait(timeout=10)
            await asyncio.gather(*steering)
            results = await asyncio.wait_for(
                asyncio.gather(*(agent.client.result(r) for r in ids)), 240
            )
        finally:
            for worker in workers[1:]:
                worker.terminate()
            for worker in workers[1:]:
                worker.wait(timeout=20)
    assert [r.terminal_reason for r in results] == [TerminalReason.COMPLETED] * RUNS
    # each run's effect happened exactly once, whichever worker ran or re-ran it
    assert (workspace / "effects.txt").read_text().splitlines() == ["effect"] * RUNS
    ledger = sorted(p.read_text() for p in (workspace / ".ledger").iterdir())
    assert len(ledger) == RUNS and len({key.split("/")[0] for key in ledger}) == RUNS
    # all three hosts took tasks (the killed one too, before it died)
    events = [e for r in ids for h in await load_histories(agent.temporal, r) for e in h.events]
    identities = {
        attrs.identity.split("@")[0]
        for e in events
        for attrs in (
            e.workflow_task_started_event_attributes,
            e.activity_task_started_event_attributes,
        )
        if attrs.identity
    }
    assert identities == pids
    # every message reached its run's model
    seen = json.dumps(fake.requests)
    assert all(f"note for {run_id}" in seen for run_id in ids)
    # the shared store holds the runs' blobs; a client elsewhere reads a transcript from it
    steps = build_transcript(agent.client.content(), await agent.client.transcript_view(ids[-1]))
    assert [c.observation for s in steps for c in s.tool_calls if c.name == "shout"] == [
        "AFTER THE MESSAGE"
    ]
