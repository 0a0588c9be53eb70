"""The `agent` fixture's machinery: a scripted model, a worker and a client, set up once.

Almost every integration test needs the same three things: a fake provider serving a script, an
in-process worker whose model is that fake, and a client on the test's task queue. `Agent` builds
them; `Run` is what a finished run left behind (its result, the requests the model saw, its
status and transcript), collected while the worker still answers queries.

    run = await agent.run([say(call("finish", answer="ok"))], max_steps=3)

A test that steers a run mid-way opens the worker itself and finishes the run the same way:

    async with agent.serving(script) as live:
        run_id = await live.start(agent.spec())
        await live.client.pause(run_id)
        run = await live.finish(run_id, history="paused")

Never used outside the tests; `record_history` (CAPSTAN_RECORD_HISTORIES=1) is reached through
`finish(..., history=name)`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle

from capstan.client.runs import CapstanClient
from capstan.client.transcript import StepView, build_transcript
from capstan.core.spec import RunResult, RunSpec, RunStatus
from capstan.core.workflow_io import TranscriptView
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Fault, Script
from capstan.testing.worker import FAST
from tests.integration.helpers import record_history, running_worker

__all__ = ["FAST", "Agent", "Live", "Run"]

#: worker environment on top of the fake's: a mapping, or built from the running fake
Env = dict[str, str] | Callable[[FakeProvider], dict[str, str]]


@dataclass
class Run:
    """A finished run: its result and everything a test asserts on afterwards."""

    client: CapstanClient
    fake: FakeProvider
    run_id: str
    result: RunResult
    status: RunStatus
    view: TranscriptView
    steps: list[StepView]

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every model request the fake received (summaries excluded), in arrival order."""
        return self.fake.requests

    @property
    def handle(self) -> WorkflowHandle[object, RunResult]:
        return self.client.handle(self.run_id)

    def messages(self, request: int, role: str) -> list[dict[str, Any]]:
        """The messages of one role in the `request`-th model request (negative counts back)."""
        return [m for m in self.requests[request]["messages"] if m["role"] == role]


@dataclass
class Live:
    """A client and the fake it is scripted by, while some worker serves the run."""

    client: CapstanClient
    fake: FakeProvider

    async def start(self, spec: RunSpec) -> str:
        return await self.client.start_run(spec)

    async def finish(
        self, run_id: str, history: str | None = None, timeout: float | None = None
    ) -> Run:
        """Wait for the result (at most `timeout` seconds), then read status and transcript;
        record the history under `history` when CAPSTAN_RECORD_HISTORIES=1."""
        result = await asyncio.wait_for(self.client.result(run_id), timeout)
        status = await self.client.status(run_id)
        view = await self.client.transcript_view(run_id)
        steps = build_transcript(self.client.content(), view)
        if history is not None:
            await record_history(self.client.handle(run_id), history)
        return Run(self.client, self.fake, run_id, result, status, view, steps)


@dataclass
class Agent:
    """A scripted agent on the test's own server, task queue and data dir."""

    temporal: Client
    settings: Settings

    @property
    def client(self) -> CapstanClient:
        return CapstanClient(self.temporal, self.settings)

    def configure(self, **updates: Any) -> Agent:
        """Change the worker's settings (tools module, finish guard, ...) for this test."""
        self.settings = self.settings.model_copy(update=updates)
        return self

    def spec(self, task: str = "do the task", **fields: Any) -> RunSpec:
        """A run spec with fast retries unless `fields` says otherwise."""
        fields.setdefault("tuning", FAST)
        return RunSpec(task=task, **fields)

    @contextlib.asynccontextmanager
    async def serving(
        self,
        script: Script | FakeProvider,
        *,
        faults: dict[int, Fault] | None = None,
        env: Env | None = None,
        **worker_options: Any,
    ) -> AsyncIterator[Live]:
        """A fake provider serving `script` and a worker whose model it is, for the block.

        Pass a `FakeProvider` instead of a script to keep one fake across several workers
        (its lifetime is then the caller's). `worker_options` go to `build_worker`.
        """
        with contextlib.ExitStack() as stack:
            fake = (
                script
                if isinstance(script, FakeProvider)
                else stack.enter_context(FakeProvider(script, faults=faults or {}))
            )
            extra = env(fake) if callable(env) else env
            async with running_worker(
                self.temporal, self.settings, fake, env=extra, **worker_options
            ):
                yield Live(self.client, fake)

    async def run(
        self,
        script: Script | FakeProvider,
        spec: RunSpec | None = None,
        *,
        faults: dict[int, Fault] | None = None,
        env: Env | None = None,
        history: str | None = None,
        timeout: float | None = None,
        worker: dict[str, Any] | None = None,
        **spec_fields: Any,
    ) -> Run:
        """Run `spec` (default: `self.spec(**spec_fields)`) against `script` to its end."""
        if spec is not None and spec_fields:
            raise TypeError(f"give a spec or its fields, not both: {sorted(spec_fields)}")
        async with self.serving(script, faults=faults, env=env, **(worker or {})) as live:
            run_id = await live.start(spec if spec is not None else self.spec(**spec_fields))
            return await live.finish(run_id, history, timeout)
