"""`call_model`'s own cost as the conversation grows, with the provider round trip taken out.

A run of `steps` model calls is simulated in-process exactly as a worker sees it: each call gets
the previous head plus the last step's tool results (three 500-byte outputs), and the provider is
an instant in-process `httpx.MockTransport`, so what is timed is the worker's side: loading the
chain, rendering, counting tokens, building the wire request, parsing the reply and appending
the new segment. The adapter's share (building the wire body, JSON-encoding it, the in-process
exchange, parsing the reply) is timed apart and reported as `wire`: the API takes the whole
conversation, so it is O(conversation) in bytes, but each message is encoded once per worker
(`providers/wire_cache.py`). Reported: the median per call around step 20 and around step 300,
their ratio, and call_model at step 300 on a worker with cold caches (just restarted); the same
in CPU time of the process (`own_cpu`: every thread, the adapter's share taken out), which other
processes on a loaded machine do not inflate the way they inflate wall time.

The sequential reading times step 20 early in a run and step 300 seconds later, so it also
counts what changed meanwhile: the process's heap and caches, and the disk — each call writes a
segment file, and on this machine's ext4 creating a file took ~5 us on a quiet disk and 250-330
us under the bench's own stream of writes. `same_time_*` takes that out: a new run's calls near
step 20 alternate with the long run's near step 300 (`_side_by_side`), so both are timed in the
same process state; their ratio is what the conversation's length alone costs.

    python -m bench.call_model_cost [--steps 320]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from capstan.activities import model as model_module
from capstan.activities.model import ModelActivities
from capstan.core.activity_io import CallModelInput
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore, LocalBlobStore

__all__ = ["measure"]

TOOLS = [
    {
        "name": f"tool_{i}",
        "description": f"tool number {i}, which does something useful",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for i in range(8)
]


def _reply(request: httpx.Request) -> httpx.Response:
    # the body is not parsed: the provider's side of the exchange is not what is measured
    step = len(request.content)
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"c{step}-{k}",
                "type": "function",
                "function": {"name": "tool_1", "arguments": json.dumps({"path": f"d{step}/{k}"})},
            }
            for k in range(3)
        ],
    }
    usage = {"prompt_tokens": len(request.content) // 4, "completion_tokens": 20}
    reply = {"model": "bench", "choices": [{"message": message, "finish_reason": "tool_calls"}]}
    return httpx.Response(200, json={**reply, "usage": usage})


def _results(step: int, calls: tuple[str, ...]) -> tuple[Message, ...]:
    return tuple(
        Message(
            role="tool",
            content=f"{step}:{call}:" + ("output line of a tool\n" * 24)[:480],
            tool_call_id=call,
            name="tool_1",
            origin="tool",
            step=step,
        )
        for call in calls
    )


def _activities(root: Path, http: httpx.AsyncClient) -> tuple[ModelActivities, BlobRef]:
    content = ContentStore(LocalBlobStore(root))
    env = {
        "CAPSTAN_MODEL": "openai:bench",
        "OPENAI_BASE_URL": "http://bench/v1",
        "CAPSTAN_STREAM": "0",
    }
    tools = content.store_bytes(json.dumps(TOOLS).encode())
    return ModelActivities(content, env, http), tools


class _Timed:
    """The adapter of one call, timed: its share is the provider exchange, not call_model's."""

    def __init__(self, inner: Any, spent: list[float], cpu: list[float]) -> None:
        self.inner, self.spent, self.cpu = inner, spent, cpu

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            return await self.inner.complete(*args, **kwargs)
        finally:
            self.spent.append(time.perf_counter() - started)
            self.cpu.append(time.process_time() - started_cpu)


async def _one(models: ModelActivities, request: CallModelInput) -> tuple[float, float, float, Any]:
    """(call_model's own seconds, the adapter's seconds, call_model's own CPU seconds (all
    threads of the process: what other processes on a loaded machine do not inflate), the
    reply)."""
    spent: list[float] = []
    cpu: list[float] = []
    original = model_module.adapter_for
    model_module.adapter_for = lambda profile, http: _Timed(original(profile, http), spent, cpu)
    try:
        started, started_cpu = time.perf_counter(), time.process_time()
        reply = await models.call_model(request)
        took, took_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    finally:
        model_module.adapter_for = original
    return took - sum(spent), sum(spent), took_cpu - sum(cpu), reply


async def _sequence(root: Path, http: httpx.AsyncClient, steps: int) -> dict[str, list[float]]:
    """One simulated run: per-call own and adapter seconds, and cold calls at the end."""
    models, tools = _activities(root, http)
    head: BlobRef | None = None
    pending: tuple[Message, ...] = (
        Message(role="system", content="You are a bench.", origin="system"),
        Message(role="user", content="do the bench"),
    )
    own: list[float] = []
    wire: list[float] = []
    own_cpu: list[float] = []
    for step in range(1, steps + 1):
        request = CallModelInput(
            run_id="bench", step=step, profile="default", conversation=head,
            new_messages=pending, tools=tools,
        )  # fmt: skip
        took, adapter, took_cpu, reply = await _one(models, request)
        own.append(took)
        wire.append(adapter)
        own_cpu.append(took_cpu)
        head = reply.conversation
        pending = _results(step, tuple(c.id for c in reply.message.tool_calls))
    cold = [(await _one(_activities(root, http)[0], request))[0] for _ in range(3)]
    return {"own": own, "wire": wire, "own_cpu": own_cpu, "cold": cold}


async def _side_by_side(root: Path, http: httpx.AsyncClient, steps: int) -> dict[str, list[float]]:
    """A long run and a new one whose calls alternate with its last 40: the new run's calls
    near step 20 are timed in the same process state as the long run's near step 300 (the same
    caches, heap, thread pool and disk activity), so their ratio is what the conversation's
    length costs, apart from how long the process has been busy."""
    models, tools = _activities(root, http)
    runs: dict[str, tuple[BlobRef | None, tuple[Message, ...]]] = {
        name: (
            None,
            (
                Message(role="system", content=f"You are bench {name}.", origin="system"),
                Message(role="user", content="do the bench"),
            ),
        )
        for name in ("long", "new")
    }
    found: dict[str, list[float]] = {"long": [], "new": [], "long_cpu": [], "new_cpu": []}

    async def call(name: str, step: int, window: range) -> None:
        head, pending = runs[name]
        request = CallModelInput(
            run_id=name, step=step, profile="default", conversation=head,
            new_messages=pending, tools=tools,
        )  # fmt: skip
        took, _, took_cpu, reply = await _one(models, request)
        if step in window:
            found[name].append(took)
            found[f"{name}_cpu"].append(took_cpu)
        calls = tuple(c.id for c in reply.message.tool_calls)
        runs[name] = (reply.conversation, _results(step, calls))

    late, early = range(steps - 30, steps - 10), range(10, 30)
    for step in range(1, steps + 1):
        await call("long", step, late)
        if step > steps - 40:
            await call("new", step - (steps - 40), early)
    return found


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


async def measure(steps: int = 320, repeats: int = 5) -> dict[str, Any]:
    """Medians over `repeats` simulated runs of the per-call time near step 20 and step 300."""
    near_20: list[float] = []
    near_300: list[float] = []
    wire_20: list[float] = []
    wire_300: list[float] = []
    cold: list[float] = []
    cpu_20: list[float] = []
    cpu_300: list[float] = []
    same_time: dict[str, list[float]] = {"long": [], "new": [], "long_cpu": [], "new_cpu": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            async with httpx.AsyncClient(transport=httpx.MockTransport(_reply)) as http:
                run = await _sequence(Path(tmp), http, steps)
        with tempfile.TemporaryDirectory() as tmp:
            async with httpx.AsyncClient(transport=httpx.MockTransport(_reply)) as http:
                for key, values in (await _side_by_side(Path(tmp), http, steps)).items():
                    same_time[key] += values
        near_20 += run["own"][10:30]
        near_300 += run["own"][steps - 30 : steps - 10]
        wire_20 += run["wire"][10:30]
        wire_300 += run["wire"][steps - 30 : steps - 10]
        cpu_20 += run["own_cpu"][10:30]
        cpu_300 += run["own_cpu"][steps - 30 : steps - 10]
        cold += run["cold"]
    return {
        "steps": steps,
        "repeats": repeats,
        "own_ms_at_step_20": _ms(near_20),
        "own_ms_at_step_300": _ms(near_300),
        "own_ratio_300_to_20": round(statistics.median(near_300) / statistics.median(near_20), 3),
        "own_ms_at_step_300_cold_worker": _ms(cold),
        "wire_ms_at_step_20": _ms(wire_20),
        "wire_ms_at_step_300": _ms(wire_300),
        "own_cpu_ms_at_step_20": _ms(cpu_20),
        "own_cpu_ms_at_step_300": _ms(cpu_300),
        "own_cpu_ratio_300_to_20": round(statistics.median(cpu_300) / statistics.median(cpu_20), 3),
        # the long run's calls near step 300 against a new run's near step 20, alternating
        "same_time_own_ms_at_step_20": _ms(same_time["new"]),
        "same_time_own_ms_at_step_300": _ms(same_time["long"]),
        "same_time_own_ratio_300_to_20": round(
            statistics.median(same_time["long"]) / statistics.median(same_time["new"]), 3
        ),
        "same_time_own_cpu_ratio_300_to_20": round(
            statistics.median(same_time["long_cpu"]) / statistics.median(same_time["new_cpu"]), 3
        ),
        "target": "own ratio <= 1.3 and own <= 2 ms at step 20",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=320)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.steps)), indent=2))


if __name__ == "__main__":
    main()
