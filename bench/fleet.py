"""Fleet flow control (issue 30): three worker processes, one provider that allows R calls a
second, and tenants that share it.

    python bench/fleet.py [--rate 20] [--runs 60] [--calls 5] [--hold 0.3] [--declared 1.0]

The provider is the fake on a real socket, in this process: it answers at most `--rate`
requests in any second (a sliding window) and 429 with `Retry-After: 1` beyond it, and takes
`--hold` seconds to answer (a model's latency). Three `worker.py` processes serve one task
queue of the embedded dev server; the profiles file gives the `default` profile
`requests_per_second = declared x rate`, which every worker declares to the server.

1. **Throughput**: first the baseline, the same runs on a profile of the same provider with
   no limits (every worker calls as fast as its runs ask); then `--runs` runs of `--calls`
   model calls each (a read-only tool between calls), started at once. Reported: runs that did
   not complete (target 0), 429s as a share of all model requests (target <= 5%), and calls
   answered a second, from the first answer to the last, as a share of R (target >= 85%).
2. **Fairness**: tenant `small` starts 5 runs alone and times them (start to last result);
   then tenant `big` starts 50 runs and, a second later, `small` 5 runs again. Reported: the
   small tenant's time with the big one beside it over its time alone (target <= 1.5); the
   baseline is the same runs without fairness keys.

The load average is reported before and after. Writes `bench/results/fleet.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.workers import capstan_worker, polling, stop  # noqa: E402
from capstan.client.runs import CapstanClient, connect_temporal  # noqa: E402
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402
from capstan.testing.fake_provider import FakeProvider, Reply, call, say  # noqa: E402
from capstan.testing.ports import free_port  # noqa: E402
from capstan.testing.worker import model_env  # noqa: E402

WORKERS = 3
TUNING = ActivityTuning(model_initial_retry=0.5)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _script(calls: int) -> Any:
    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if step >= calls - 1:
            return say(call("finish", answer="done"))
        return say(call("list_dir", path="."))

    return script


async def _batch(client: CapstanClient, specs: list[RunSpec]) -> tuple[float, list[str]]:
    """Start `specs` at once; (seconds to the last result, the terminal reasons)."""
    started = time.monotonic()
    ids = await asyncio.gather(*(client.start_run(spec) for spec in specs))
    results = await asyncio.gather(*(client.result(run_id) for run_id in ids))
    return time.monotonic() - started, [r.terminal_reason.value for r in results]


def _specs(
    n: int, calls: int, tenant: str | None = None, tag: str = "", model: str = "default"
) -> list[RunSpec]:
    return [
        RunSpec(
            task=f"{tag}{i}",
            max_steps=calls + 2,
            tuning=TUNING,
            fairness_key=tenant,
            model=model,
        )
        for i in range(n)
    ]


async def throughput(
    client: CapstanClient,
    fake: FakeProvider,
    rate: float,
    runs: int,
    calls: int,
    *,
    model: str = "default",
) -> dict[str, Any]:
    await asyncio.sleep(2.0)  # the provider's bucket refills between sections
    fake.answered_at.clear()
    fake.refused_at.clear()
    fake.throttled = 0
    seconds, reasons = await _batch(client, _specs(runs, calls, tag="t", model=model))
    answered = list(fake.answered_at)
    span = answered[-1] - answered[0] if len(answered) > 1 else float("nan")
    requests = len(answered) + fake.throttled
    first = answered[0] if answered else 0.0
    when = [round(t - first, 1) for t in fake.refused_at]
    return {
        "runs": runs,
        "calls_per_run": calls,
        "not_completed": sum(r != TerminalReason.COMPLETED.value for r in reasons),
        "model_requests": requests,
        "refused_429": fake.throttled,
        "refused_share": round(fake.throttled / requests, 4),
        "refused_in_first_second": sum(t < 1.0 for t in when),
        "refused_at_seconds": when,
        "answered_per_second": round((len(answered) - 1) / span, 2),
        "throughput_of_rate": round((len(answered) - 1) / span / rate, 3),
        "wall_seconds": round(seconds, 2),
    }


async def fairness(
    client: CapstanClient, fake: FakeProvider, calls: int, *, keyed: bool = True
) -> dict[str, Any]:
    """The small tenant alone, then beside the big one; `keyed=False`: the baseline, the same
    runs with no fairness keys (one first-in, first-out queue)."""
    small, large = ("small", "big") if keyed else (None, None)
    await asyncio.sleep(2.0)  # the provider's bucket refills between sections
    before = len(fake.answered_at)
    alone, reasons = await _batch(client, _specs(5, calls, small, "alone"))
    alone_calls = len(fake.answered_at) - before
    big = asyncio.ensure_future(_batch(client, _specs(50, calls, large, "big")))
    await asyncio.sleep(1.0)
    beside, small_reasons = await _batch(client, _specs(5, calls, small, "beside"))
    big_seconds, big_reasons = await big
    every = [*reasons, *small_reasons, *big_reasons]
    return {
        "small_alone_seconds": round(alone, 2),
        "small_alone_calls": alone_calls,
        "small_beside_big_seconds": round(beside, 2),
        "ratio": round(beside / alone, 2),
        "big_seconds": round(big_seconds, 2),
        "not_completed": sum(r != TerminalReason.COMPLETED.value for r in every),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"load_average_before": _load(), "rate": args.rate}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        profiles = data / "profiles.toml"
        declared = round(args.rate * args.declared, 3)
        text = f"[limits.default]\nrequests_per_second = {declared}\n"
        if args.concurrency:
            text += f"concurrency = {args.concurrency}\n"
        result["declared_rate"] = declared
        result["provider_limiter"] = args.shape
        result["concurrency_per_worker"] = args.concurrency
        async with EmbeddedServer(data / "temporal", port=free_port()) as server:
            settings = Settings(
                data_dir=data / "capstan",
                temporal_address=server.address,
                task_queue=f"fleet-{uuid.uuid4().hex[:6]}",
            )
            settings.data_dir.mkdir(parents=True)
            client = CapstanClient(await connect_temporal(settings), settings)
            script = _script(args.calls)
            with FakeProvider(
                script,
                rate_limit=args.rate,
                rate_shape=args.shape,
                retry_after=1.0,
                latency=args.hold,
            ) as fake:
                # the baseline: the same provider as a profile with no limits
                free = '[profiles.free]\nprovider = "openai"\nmodel = "fake"\n'
                profiles.write_text(text + free + f'base_url = "{fake.base_url}"\n')
                env = {**model_env(fake), "CAPSTAN_PROFILES": str(profiles)}
                logs = [data / f"worker-{i}.log" for i in range(WORKERS)]
                workers = [capstan_worker(settings, env, log) for log in logs]
                try:
                    for log in logs:
                        await polling(log)
                    await _batch(client, _specs(3, 2, tag="warm"))  # every worker warmed up
                    result["unpaced_baseline"] = await throughput(
                        client, fake, args.rate, args.runs, args.calls, model="free"
                    )
                    result["throughput"] = await throughput(
                        client, fake, args.rate, args.runs, args.calls
                    )
                    result["fairness_baseline"] = await fairness(
                        client, fake, args.calls, keyed=False
                    )
                    result["fairness"] = await fairness(client, fake, args.calls)
                finally:
                    for worker in workers:
                        stop(worker)
    result["load_average_after"] = _load()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="the provider's R a second")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--calls", type=int, default=5, help="model calls a run")
    parser.add_argument("--hold", type=float, default=1.0, help="the provider's latency (s)")
    parser.add_argument(
        "--declared", type=float, default=1.0, help="the workers' declared rate, a share of R"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="the profile's calls at once per worker (0: none)",
    )
    parser.add_argument(
        "--shape",
        choices=["bucket", "window"],
        default="bucket",
        help="the provider's limiter: a token bucket of R (as Anthropic's), or R in any second",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fleet.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
