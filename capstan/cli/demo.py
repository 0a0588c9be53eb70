"""`capstan demo`: what Capstan is for, in one run you can watch.

The demo starts the embedded Temporal server, a worker process and one agent run that copies the
line of a file into a new file (`capstan.cli.demo_task`). Mid-run it SIGKILLs that worker and
starts another: the run carries on from the step it was at. The write waits for a reviewer; the
demo shows the request and its arguments hash and approves it. At the end it says plainly
whether what was written (and answered) matches the line, verifies the run's audit trail and
writes the HTML audit page.

The model: `CAPSTAN_MODEL` if set; else the bundled SmolLM2 when the `local` extra is installed;
else Capstan's scripted offline model (the fake provider the tests use), so a fresh machine
still sees the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from capstan.audit.events import RunEvent, derive_events
from capstan.audit.follow import HistoryFollower
from capstan.audit.history import decode_history, load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail, verify_chain
from capstan.cli.demo_task import DEMO_TASK, GUARDS, TOOLS, Verdict
from capstan.client.runs import CapstanClient
from capstan.core.spec import ActivityTuning, RunResult, RunSpec, TerminalReason
from capstan.runtime import local_model
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Reply, call, say

__all__ = ["run_demo"]

#: The worker is killed while the model call of this step (counted from 1) is in flight.
KILL_AT_STEP = 3
#: Short heartbeats so the killed worker's activity is retried within seconds.
TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.5)


def _scripted(step: int, messages: list[dict[str, Any]]) -> Reply:
    """An offline 'model' that reads its observations, so what it writes comes from the file."""
    task = DEMO_TASK
    observed = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    if step == 0:
        return say(call("list_dir"), content="Let me look at the workspace first.")
    if step == 1:
        return say(call("read_file", path=task.source), content=f"{task.source} is there.")
    line = next((ln for text in observed for ln in text.splitlines() if task.line in ln), "")
    if step == KILL_AT_STEP - 1:  # held long enough for the demo to kill the worker mid-call
        return Reply(
            content="Copying the line.",
            tool_calls=(("write_file", {"path": task.target, "content": line.strip()}),),
            hold_seconds=3.0,
        )
    written = next((t for t in observed if task.target in t), "")
    answer = task.line if written else "nothing written"
    return say(call("finish", answer=answer), content="Done.")


@contextlib.contextmanager
def _model_env(settings: Settings, scripted: bool) -> Iterator[dict[str, str]]:
    """The workers' environment: the configured model, the bundled one, or the scripted one."""
    env = dict(os.environ)
    # the demo's task is copying a line: the bundled model's choices include the lines read
    env.setdefault("CAPSTAN_LOCAL_CHOICES", "lines")
    if scripted:
        env.pop("CAPSTAN_MODEL", None)
    elif env.get("CAPSTAN_MODEL"):
        print(f"model: {env['CAPSTAN_MODEL']} (CAPSTAN_MODEL)")
        yield env
        return
    elif local_model.available():
        print("model: the bundled SmolLM2-135M (local:smollm2), served on this machine")
        with local_model.local_model_env(env, settings.data_dir) as served:
            yield served
        return
    print(
        "model: Capstan's scripted offline model. For a real one set CAPSTAN_MODEL, e.g.\n"
        "  CAPSTAN_MODEL=openai:<model> OPENAI_API_KEY=<key> [OPENAI_BASE_URL=<url>]"
    )
    with FakeProvider(_scripted, model="capstan-scripted-demo") as fake:
        env.update({"CAPSTAN_MODEL": "openai:scripted-demo", "OPENAI_BASE_URL": fake.base_url})
        env.setdefault("OPENAI_API_KEY", "demo-not-a-secret")
        yield env


class _Workers:
    """Worker processes started the way a user starts them (`capstan worker`)."""

    def __init__(self, env: dict[str, str], settings: Settings) -> None:
        self.env = {
            **env,
            "CAPSTAN_DATA_DIR": str(settings.data_dir),
            "CAPSTAN_TASK_QUEUE": settings.task_queue,
            "CAPSTAN_TEMPORAL_PORT": str(settings.embedded_port),
        }
        self.log = settings.data_dir / "demo-workers.log"
        self.current: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        with self.log.open("ab") as log:
            self.current = subprocess.Popen(
                [sys.executable, "-m", "capstan", "worker"],
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self.current.pid

    def kill(self) -> int:
        assert self.current is not None
        pid = self.current.pid
        os.kill(pid, signal.SIGKILL)
        self.current.wait()
        return pid

    def stop(self) -> None:
        if self.current is not None and self.current.poll() is None:
            self.current.terminate()
            try:
                self.current.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.current.kill()


async def run_demo(settings: Settings, scripted: bool = False) -> int:
    from capstan import worker

    workspace = settings.workspace_dir
    DEMO_TASK.prepare(workspace)
    with _model_env(settings, scripted) as env:
        async with worker.temporal_for(settings) as temporal:
            client = CapstanClient(temporal, settings)
            workers = _Workers(env, settings)
            try:
                print(f"worker 1 started (pid {workers.start()}); Temporal at {settings.address}")
                spec = RunSpec(
                    task=DEMO_TASK.task,
                    system_prompt=DEMO_TASK.system,
                    allowed_tools=TOOLS,
                    max_steps=8,
                    tuning=TUNING,
                    guards=GUARDS,
                )
                run_id = await client.start_run(spec)
                print(f"run {run_id} started; workspace {workspace}\n")
                result = await _narrate(client, run_id, workers)
            finally:
                workers.stop()
            return await _conclude(client, run_id, result, workspace, settings.data_dir)


async def _narrate(client: CapstanClient, run_id: str, workers: _Workers) -> RunResult:
    """Print the run's events; kill the worker mid-step, restart it; approve the write."""
    killed_at: int | None = None
    async for event in _events(client, run_id):
        step = f" step {event.step}" if event.step is not None else ""
        print(f"  {event.kind}{step}  {event.summary}".rstrip(), flush=True)
        if event.kind == "step_started" and event.step == KILL_AT_STEP and killed_at is None:
            await asyncio.sleep(1.0)  # the model call of this step is in flight now
            print(f"\n  >>> SIGKILL worker 1 (pid {workers.kill()}) while step {event.step} runs")
            print(f"  >>> worker 2 started (pid {workers.start()}); the run is only in Temporal\n")
            killed_at = event.step
        elif event.kind == "model_replied" and killed_at is not None and event.step == killed_at:
            print(f"  >>> the run carried on at step {killed_at} on worker 2: nothing was lost\n")
            killed_at = -1
        elif event.kind == "approval_requested":
            await _approve(client, run_id)
        elif event.kind == "run_ended":
            break
    return await client.result(run_id)


async def _events(client: CapstanClient, run_id: str) -> AsyncIterator[RunEvent]:
    follower = await HistoryFollower.start(client.client, run_id)
    assert follower is not None
    shown = 0
    while not follower.closed:
        if await follower.poll(wait=0.5):
            events = derive_events(follower.entries())
            for event in events[shown:]:
                yield event
            shown = len(events)


async def _approve(client: CapstanClient, run_id: str) -> None:
    """Play the reviewer: show the request as `capstan pending` does, then approve it."""
    content = client.content()
    for request in (await client.pending(run_id)).approvals:
        print(f"\n  approval request {request.request_id}: {request.reason}")
        print(f"    {request.tool}({content.resolve(request.arguments)})")
        print(f"    arguments hash {request.args_hash[:16]}… (the decision is bound to it)")
        await client.decide(
            run_id,
            "approve",
            request.request_id,
            args_hash=request.args_hash,
            reason="the demo reviewer checked the line",
            checked=True,
        )
        print(f"    approved by {client.settings.identity}\n")


async def _conclude(
    client: CapstanClient, run_id: str, result: RunResult, workspace: Path, data_dir: Path
) -> int:
    content = client.content()
    answer = content.resolve(result.output) if result.output is not None else ""
    print(f"\nresult: {result.terminal_reason.value} after {result.steps} steps")
    print(f"answer: {answer or result.error}")
    done = DEMO_TASK.check(workspace)
    matched = done.matched and DEMO_TASK.line in answer
    print(_verdict_line(done, answer))
    runs = [decode_history(h) for h in await load_histories(client.client, run_id)]
    records, issues = build_trail(runs, content)
    problems = issues + verify_chain(records)
    page = data_dir / f"audit-{run_id}.html"
    page.write_text(render_trail(records, issues, "html"), encoding="utf-8")
    verdict = "verified" if not problems else f"{len(problems)} problems"
    print(f"audit: {len(records)} records, hash chain and blobs {verdict}")
    print(f"audit page: {page.resolve()}")
    print(f"again from the CLI: capstan audit {run_id} --verify")
    completed = result.terminal_reason is TerminalReason.COMPLETED
    return 0 if completed and matched and not problems else 1


def _verdict_line(verdict: Verdict, answer: str) -> str:
    """Whether the run did the task, in one plain sentence."""
    task = DEMO_TASK
    if verdict.written is None:
        return f"the task was NOT done: {task.target} was not written"
    if not verdict.matched:
        return f"the task was NOT done: {task.target} holds {verdict.written!r}, not the line"
    if task.line not in answer:
        return f"{task.target} matches the line of {task.source}, but the answer does NOT"
    return f"{task.target} matches the line of {task.source}, and so does the answer"
