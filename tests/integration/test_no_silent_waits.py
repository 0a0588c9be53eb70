"""No silent waits: a run nobody will serve, a run waiting for you, a server that died.

Each is something a user would otherwise only find out by staring at a terminal that says
nothing: the start warns when no worker polls the queue (Python, HTTP), `capstan run --wait`
prints each open request with the command that decides it, `capstan server` exits non-zero
when its Temporal process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from capstan.client.runs import SteeringError
from capstan.testing.fake_provider import call, say
from tests.conftest import free_port
from tests.integration.helpers import ROOT
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending
from tests.integration.test_api_helpers import ALICE, api_client, app_for, auth

pytestmark = pytest.mark.server


async def test_starting_with_no_worker_warns(
    agent: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    client = agent.client
    with caplog.at_level(logging.WARNING, logger="capstan.client"):
        run_id = await client.start_run(agent.spec())
    (record,) = [r for r in caplog.records if r.name == "capstan.client"]
    assert run_id in record.getMessage() and "no worker is polling" in record.getMessage()
    async with api_client(app_for(client)) as http:
        r = await http.post("/api/runs", json={"task": "x"}, headers=auth(ALICE))
        assert r.status_code == 201, r.text
        (warning,) = r.json()["warnings"]
        assert r.json()["run_id"] in warning and agent.settings.task_queue in warning
    async with agent.serving([say(call("finish", answer="ok"))]) as live:
        await wait_for(live.client.workers_polling, bool)
        async with api_client(app_for(live.client)) as http:
            r = await http.post("/api/runs", json={"task": "x"}, headers=auth(ALICE))
            assert r.json()["warnings"] == [], r.text
        for pending in (run_id, r.json()["run_id"]):
            with contextlib.suppress(SteeringError):  # it may have finished already
                await live.client.cancel(pending)


def _env(agent: Agent) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": agent.settings.address,
        "CAPSTAN_TASK_QUEUE": agent.settings.task_queue,
        "CAPSTAN_DATA_DIR": str(agent.settings.data_dir),
    }


async def test_run_wait_prints_what_the_run_waits_for(agent: Agent, workspace: Path) -> None:
    script = [say(call("write_file", path="a.txt", content="A")), say(call("finish", answer="ok"))]
    async with agent.serving(script) as live:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "capstan",
            "run",
            "write a.txt",
            "--wait",
            env=_env(agent),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None and proc.stdout is not None
        said: list[str] = []
        while not any("deny:    capstan deny" in line for line in said):
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, f"capstan run --wait ended first: {said}"
            said.append(line.decode())
        run_id = said[0].split()[1]  # "run RUN started; waiting for its result"
        (request,) = (await wait_pending(live.client, run_id)).approvals
        text = "".join(said)
        assert "waits for approval: write_file(" in text
        assert f"capstan approve {run_id} {request.request_id} --hash {request.args_hash}" in text
        assert f"capstan deny {run_id} {request.request_id} --reason" in text
        await live.client.decide(run_id, "approve", request.request_id, checked=True)
        out, rest = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (out, rest)
    assert f"run {run_id}: completed" in out.decode()
    assert (text + rest.decode()).count("waits for approval") == 1  # said once


async def test_server_exits_when_its_temporal_process_dies(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "CAPSTAN_DATA_DIR": str(tmp_path / "data"),
        "CAPSTAN_TEMPORAL_PORT": str(port),
    }
    env.pop("TEMPORAL_ADDRESS", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "capstan",
        "server",
        "--no-ui",
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 90)
        assert b"listening on" in line, line
        ps = await asyncio.create_subprocess_exec(
            "ps", "-o", "pid=", "--ppid", str(proc.pid), stdout=subprocess.PIPE
        )
        children = (await ps.communicate())[0].split()
        assert children, "the dev server runs as a child of capstan server"
        for child in children:
            os.kill(int(child), signal.SIGKILL)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode != 0
    message = err.decode()
    assert "the Temporal dev server exited" in message and "Traceback" not in message
