"""`bench/parked.py`: the growth per parked run is read within one worker, after its first
stage, not between two workers' figures."""

from __future__ import annotations

from bench.parked import MB, _report


def test_growth_is_per_run_after_the_first_stage_of_the_same_worker() -> None:
    found = {
        "idle_rss": 100 * MB,
        "parked_rss": 160 * MB,
        "released_rss": 130 * MB,
        "released_rss_at_base": 121 * MB,
        "latencies": [0.02],
        "cached": [],
    }
    report = _report(found, runs=10_000, first_stage=1_000)
    assert report["parked_rss_after_idle_at_first_stage_mb"] == 121.0
    assert report["kb_per_parked_run_after_first_stage_once_idle"] == round(9 * 1024 / 9_000, 2)
    # one stage only: no growth to read
    assert "kb_per_parked_run_after_first_stage_once_idle" not in _report(found, runs=1_000)
