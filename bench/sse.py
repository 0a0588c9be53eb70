"""The SSE stream's cost per event, early and late in a 1,000-step run.

    python bench/sse.py [--steps 1000] [--out bench/results/sse.json]

A real run (dev server, worker, fake provider) of `--steps` steps continues as new every 50
steps. Its recorded history is then fed to the stream's own machinery — a real
`HistoryFollower` whose history service answers one workflow task at a time, as a long poll on
a live run does — and each answer is timed through to the derived, numbered events:

- `stream`: `ChainEvents` (what `capstan serve` runs): closed runs of the chain derived once;
- `baseline`: `derive_events(follower.entries())` on every answer (re-derive everything).

Reported: seconds per event in steps 1-100 and in the last 100 steps, and their ratio
(late/early; flat = 1.0), for both. Offline and deterministic apart from the machine's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import History, HistoryEvent  # noqa: E402
from temporalio.api.workflowservice.v1 import (  # noqa: E402
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from capstan.api.stream import ChainEvents  # noqa: E402
from capstan.audit.events import RunEvent, derive_events  # noqa: E402
from capstan.audit.follow import HistoryFollower  # noqa: E402
from capstan.audit.history import load_histories  # noqa: E402
from capstan.client.runs import CapstanClient, connect_temporal  # noqa: E402
from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason  # noqa: E402
from capstan.host.config import load_worker_config  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402
from capstan.testing.fake_provider import FakeProvider, Reply, call, say  # noqa: E402
from capstan.worker import build_worker  # noqa: E402

QUIET = GuardPolicy(
    identical_call_nudge=10**6,
    identical_call_abort=10**6,
    fruitless_nudge=10**6,
    fruitless_abort=10**6,
    similar_nudge=10**6,
    similar_abort=10**6,
    finalize_steps=0,
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script(steps: int) -> Callable[[int, list[dict[str, Any]]], Reply]:
    calls = itertools.count()  # the fake counts steps by assistant messages: compaction resets it

    def reply(step: int, messages: list[dict[str, Any]]) -> Reply:
        if next(calls) < steps - 1:
            return say(call("list_dir"))
        return say(call("finish", answer="done"))

    return reply


async def record_run(steps: int) -> tuple[str, list[list[HistoryEvent]]]:
    """Run `steps` steps for real; the events of each run of its chain."""
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedServer(Path(tmp) / "temporal", port=_free_port())
        await server.start()
        try:
            settings = Settings(
                data_dir=Path(tmp) / "capstan",
                temporal_address=server.address,
                task_queue=f"bench-sse-{uuid.uuid4().hex[:6]}",
            )
            client = CapstanClient(await connect_temporal(settings), settings)
            with FakeProvider(script(steps)) as fake:
                env = {"CAPSTAN_MODEL": "openai:bench", "OPENAI_BASE_URL": fake.base_url}
                async with (
                    httpx.AsyncClient() as http,
                    build_worker(client.client, load_worker_config(settings, env), http),
                ):
                    spec = RunSpec(task="bench sse", max_steps=steps, guards=QUIET)
                    run_id = await client.start_run(spec)
                    result = await client.result(run_id)
            assert result.terminal_reason is TerminalReason.COMPLETED, result
            histories = await load_histories(client.client, run_id)
            return run_id, [list(h.events) for h in histories]
        finally:
            server.stop()


def _batches(events: list[HistoryEvent]) -> list[list[HistoryEvent]]:
    """The answers a long poll gives on a live run: up to each completed workflow task."""
    out: list[list[HistoryEvent]] = [[]]
    for event in events:
        out[-1].append(event)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            out.append([])
    return [b for b in out if b]


class _ReplayedService:
    """`GetWorkflowExecutionHistory` over a recorded chain, one batch per call."""

    def __init__(self, runs: list[list[HistoryEvent]]) -> None:
        self.batches = {
            run[0].workflow_execution_started_event_attributes.original_execution_run_id
            or str(i): _batches(run)
            for i, run in enumerate(runs)
        }

    async def get_workflow_execution_history(
        self, request: GetWorkflowExecutionHistoryRequest, **_: Any
    ) -> GetWorkflowExecutionHistoryResponse:
        batches = self.batches[request.execution.run_id]
        i = int(request.next_page_token or b"0")
        events = batches[i] if i < len(batches) else []
        return GetWorkflowExecutionHistoryResponse(
            history=History(events=events), next_page_token=str(i + 1).encode()
        )


class _ReplayedClient:
    namespace = "default"
    data_converter = pydantic_data_converter

    def __init__(self, runs: list[list[HistoryEvent]]) -> None:
        self.workflow_service = _ReplayedService(runs)


def _first_run_id(runs: list[list[HistoryEvent]]) -> str:
    return runs[0][0].workflow_execution_started_event_attributes.original_execution_run_id


Derive = Callable[[int], list[RunEvent]]


async def follow(
    runs: list[list[HistoryEvent]], run_id: str, make: Callable[[HistoryFollower], Derive]
) -> list[Any]:
    """(step, events, seconds) for each answer of the replayed long polls."""
    client: Any = _ReplayedClient(runs)
    follower = HistoryFollower(client, run_id, _first_run_id(runs))
    derive = make(follower)
    samples: list[tuple[int, int, float]] = []
    next_seq, step = 0, 0
    while not follower.closed:
        started = time.perf_counter()
        grew = await follower.poll(1.0)
        new = derive(next_seq) if grew else []
        seconds = time.perf_counter() - started
        if new:
            next_seq = new[-1].seq + 1
            step = max([step] + [e.step for e in new if e.step is not None])
        samples.append((step, len(new), seconds))
    return samples


def _per_event(samples: list[Any], low: int, high: int) -> float:
    picked = [(n, s) for step, n, s in samples if low <= step <= high]
    return sum(s for _, s in picked) / max(sum(n for n, _ in picked), 1)


def summary(repeats: list[list[Any]], steps: int) -> dict[str, Any]:
    """Medians over the repeats of the cost per event early and late."""
    early = statistics.median(_per_event(r, 1, 100) for r in repeats)
    late = statistics.median(_per_event(r, steps - 99, steps) for r in repeats)
    return {
        "events": sum(n for _, n, _ in repeats[0]),
        "polls": len(repeats[0]),
        "us_per_event_steps_1_100": round(early * 1e6, 1),
        f"us_per_event_steps_{steps - 99}_{steps}": round(late * 1e6, 1),
        "late_to_early_ratio": round(late / early, 3),
    }


def _saved(path: Path) -> tuple[str, list[list[HistoryEvent]]] | None:
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    runs = [list(History.FromString(bytes.fromhex(run)).events) for run in saved["runs"]]
    return str(saved["run_id"]), runs


def _save(path: Path, run_id: str, runs: list[list[HistoryEvent]]) -> None:
    hexed = [History(events=run).SerializeToString().hex() for run in runs]
    path.write_text(json.dumps({"run_id": run_id, "runs": hexed}))


def stream(follower: HistoryFollower) -> Derive:
    return ChainEvents(follower).new_events


def baseline(follower: HistoryFollower) -> Derive:
    return lambda start: derive_events(follower.entries())[start:]


async def measure(steps: int, histories: Path | None = None, repeats: int = 3) -> dict[str, Any]:
    """Record a run (or reuse one saved in `histories`), then replay it both ways, alternating,
    after one warm-up pass."""
    recorded = _saved(histories) if histories is not None else None
    if recorded is None:
        recorded = await record_run(steps)
        if histories is not None:
            _save(histories, *recorded)
    run_id, runs = recorded
    await follow(runs, run_id, stream)  # warm-up: imports, validators, caches
    streamed, rederived = [], []
    for _ in range(repeats):
        streamed.append(await follow(runs, run_id, stream))
        rederived.append(await follow(runs, run_id, baseline))
    return {
        "steps": steps,
        "runs_in_chain": len(runs),
        "repeats": repeats,
        "stream": summary(streamed, steps),
        "baseline_rederive_everything": summary(rederived, steps),
        "target": "stream.late_to_early_ratio ~ 1.0 (constant cost per event)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sse.json")
    parser.add_argument(
        "--histories", type=Path, default=None, help="reuse (or save) the recorded run here"
    )
    args = parser.parse_args()
    result = asyncio.run(measure(args.steps, args.histories))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
