"""A 5,000-step run with 500-byte tool outputs in the default (128k-token) window.

What it shows: the window fills and is compacted, and compaction stays cheap — rare (at most one
per 20 steps in steady state) and writing what changed, so the blob store stays within 3x the
unique content the run produced. Reported: steps/s, compactions by strategy and the steps that
had one, blob-store bytes against the unique content (the same-run baseline), and the largest
single run's history in the continue-as-new chain.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from capstan.client.runs import CapstanClient
from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, Reply, call, say
from capstan.testing.run_stats import blob_bytes, run_stats, unique_content_bytes

__all__ = ["long_run"]


def long_script(steps: int, fake: FakeProvider) -> Any:
    calls = itertools.count()  # the fake counts steps by assistant messages: a summary resets it

    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        fake.requests.clear()  # 5,000 request bodies of up to ~400 KB would not fit in memory
        n = next(calls)
        if n < steps - 1:
            return say(call("big_output", size=500, seed=n))
        return say(call("finish", answer="done"))

    return script


async def long_run(
    client: CapstanClient, fake: FakeProvider, install: Any, steps: int, blobs: Path
) -> dict[str, Any]:
    """Run `steps` steps (the script installed through `install`) and measure them."""
    install(long_script(steps, fake))
    stored_before = blob_bytes(blobs)
    started = time.perf_counter()
    spec = RunSpec(
        task="bench long run",
        max_steps=steps,
        allowed_tools=("big_output",),
        guards=GuardPolicy(similar_nudge=10_000, similar_abort=10_000),
    )
    run_id = await client.start_run(spec)
    result = await client.result(run_id)
    seconds = time.perf_counter() - started
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    stats = await run_stats(client.client, run_id)
    view = await client.transcript_view(run_id)
    stored = blob_bytes(blobs) - stored_before
    unique = unique_content_bytes(client.content(), view.conversation)
    return {
        "steps": steps,
        "seconds": round(seconds, 1),
        "steps_per_second": round(steps / seconds, 2),
        "compactions": dict(stats.compactions),
        "steps_with_a_compaction": stats.compaction_steps,
        "steps_per_compaction": round(steps / max(stats.compaction_steps, 1), 1),
        "blob_bytes": stored,
        "unique_content_bytes": unique,
        "blob_to_unique_ratio": round(stored / unique, 3),
        "largest_run_history_bytes": stats.largest_run_history_bytes,
        "runs_in_chain": stats.runs,
        "targets": "blob_to_unique_ratio <= 3; steps_per_compaction >= 20",
    }
