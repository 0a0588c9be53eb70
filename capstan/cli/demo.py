"""`capstan demo`: the embedded server, a worker and one agent run, shown step by step.

With `CAPSTAN_MODEL` set, the run uses that model. Without it, the demo says what to set and then
runs against a scripted offline model (the same fake provider the tests use), so a fresh machine
still sees a durable run end to end: tool calls, observations, a file write and a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

from capstan.client.runs import CapstanClient
from capstan.client.watch import LiveText, follow, format_step
from capstan.core.spec import RunResult, RunSpec, TerminalReason
from capstan.runtime import local_model
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Reply, call, say

__all__ = ["run_demo"]

NOTES = "Capstan demo notes\nThe harbour crane lifts 42 containers an hour.\n"
TASK = (
    "List the workspace, read notes.txt, write a one-line summary of it to summary.txt, "
    "then finish with the number of containers the crane lifts per hour."
)

LOCAL_TASK = "Read notes.txt and tell me how many containers the crane lifts per hour."
LOCAL_SYSTEM = (
    "You are an agent that uses tools. Call read_file to read a file. "
    "When you know the answer, call finish with the answer."
)

NO_MODEL = (
    "No model is configured. For a real model set:\n"
    "  CAPSTAN_MODEL=openai:<model>   OPENAI_API_KEY=<key>   "
    "(OPENAI_BASE_URL=<url> for Ollama, vLLM, llama.cpp or any OpenAI-compatible server)\n"
    "Running the demo with Capstan's scripted offline model instead.\n"
)


def _scripted(step: int, messages: list[dict[str, Any]]) -> Reply:
    """An offline 'model' that reads its observations, so the answer comes from the file."""
    observed = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    if step == 0:
        return say(call("list_dir"), content="Let me look at the workspace first.")
    if step == 1:
        return say(call("read_file", path="notes.txt"), content="notes.txt is there; reading it.")
    fact = next((line for text in observed for line in text.splitlines() if "crane" in line), "")
    if step == 2:
        return say(call("write_file", path="summary.txt", content=fact), content="Summarising.")
    number = next((w for w in fact.split() if w.isdigit()), "unknown")
    return say(call("finish", answer=f"{number} containers an hour"), content="Done.")


@contextlib.contextmanager
def _model_env(settings: Settings) -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    if env.get("CAPSTAN_MODEL"):
        yield env
        return
    if local_model.available():
        print(
            "No CAPSTAN_MODEL set: using the bundled offline model SmolLM2-135M "
            "(profile local:smollm2). Set CAPSTAN_MODEL for OpenAI, Anthropic, Ollama, vLLM "
            "or llama.cpp.\nSmolLM2-135M is tiny: watch the durable loop, its guards and nudges "
            "work; do not expect a good answer from it.\n",
            flush=True,
        )
        with local_model.local_model_env(env, settings.data_dir) as served:
            yield served
        return
    print(NO_MODEL, flush=True)
    with FakeProvider(_scripted, model="capstan-scripted-demo") as fake:
        env.update({"CAPSTAN_MODEL": "openai:scripted-demo", "OPENAI_BASE_URL": fake.base_url})
        yield env


def demo_spec(env: dict[str, str]) -> RunSpec:
    """The demo run; a small local model gets a simpler task and only the tools it needs."""
    if env.get("CAPSTAN_MODEL") == local_model.LOCAL_PROFILE:
        return RunSpec(
            task=LOCAL_TASK,
            system_prompt=LOCAL_SYSTEM,
            allowed_tools=("list_dir", "read_file"),
            max_steps=6,
        )
    return RunSpec(task=TASK, max_steps=10)


async def run_demo(settings: Settings) -> int:
    from capstan import worker

    workspace = settings.workspace_dir
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text(NOTES, encoding="utf-8")
    with _model_env(settings) as env:
        async with worker.temporal_for(settings) as temporal, httpx.AsyncClient() as http:
            async with worker.build_worker(temporal, settings, http, env):
                client = CapstanClient(temporal, settings)
                run_id = await client.start_run(demo_spec(env))
                print(f"started run {run_id} on {settings.address} (workspace: {workspace})")
                reviewer = asyncio.create_task(_review(client, run_id))
                try:
                    result = await _show(client, run_id)
                finally:
                    reviewer.cancel()
    summary = workspace / "summary.txt"
    if summary.exists():
        print(f"summary.txt: {summary.read_text(encoding='utf-8').strip()}")
    return 0 if result.terminal_reason is TerminalReason.COMPLETED else 1


async def _review(client: CapstanClient, run_id: str) -> None:
    """Play the human reviewer: show each approval request, then approve it."""
    content = client.content()
    while True:
        await asyncio.sleep(0.3)
        with contextlib.suppress(Exception):
            for request in (await client.pending(run_id)).approvals:
                args = content.resolve(request.arguments)
                print(f"  approval requested: {request.tool}({args}) because {request.reason}")
                await client.decide(
                    run_id,
                    "approve",
                    request.request_id,
                    args_hash=request.args_hash,
                    reason="the demo reviewer approves",
                    checked=True,
                )
                print(f"  approved {request.request_id} as {client.settings.identity}")


async def _show(client: CapstanClient, run_id: str) -> RunResult:
    async for item in follow(client, run_id):
        if isinstance(item, LiveText):
            continue
        if isinstance(item, RunResult):
            output = client.content().resolve(item.output) if item.output is not None else ""
            print(f"\nresult: {item.terminal_reason.value} after {item.steps} steps")
            print(f"answer: {output}" if output else f"reason: {item.error}")
            print(json.dumps(item.usage.model_dump(), sort_keys=True))
            return item
        print("\n".join(format_step(item)), flush=True)
    raise RuntimeError("the run ended without a result")
