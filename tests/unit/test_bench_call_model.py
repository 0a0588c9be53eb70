"""`bench/call_model_cost.py`: both readings of call_model's growth come out of a short run."""

from __future__ import annotations

from pathlib import Path

import httpx

from bench.call_model_cost import _reply, _side_by_side, measure


async def test_side_by_side_times_both_windows_with_distinct_content(tmp_path: Path) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_reply)) as http:
        found = await _side_by_side(tmp_path, http, steps=60)
    assert {k: len(v) for k, v in found.items()} == {
        "long": 20, "new": 20, "long_cpu": 20, "new_cpu": 20
    }  # fmt: skip
    # the new run's segments are its own (a run sharing the long one's content would find
    # its segments stored already and skip the write that the long run pays)
    assert _files(tmp_path) >= 60 + 40


def _files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file())


async def test_measure_reports_the_same_time_ratio() -> None:
    report = await measure(steps=60, repeats=1)
    assert report["same_time_own_ms_at_step_20"] > 0
    assert report["same_time_own_ratio_300_to_20"] > 0
    assert report["own_ratio_300_to_20"] > 0
