"""`capstan eval DATASET`: run a dataset's cases as real runs, score them, report, compare.

The logic is in `capstan.client.evals`. Exit 0 when nothing regressed against `--baseline`
(without one: when every case passed), 1 otherwise, 2 for a dataset that cannot be run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from capstan.cli.commands import EXIT_OK, EXIT_RUN_NOT_COMPLETED, Parsers
from capstan.cli.support import client_for as _client
from capstan.client.evals import EvalDatasetError, EvalReport, compare, load_dataset, run_eval
from capstan.runtime.config import Settings

__all__ = ["register"]


def _baseline(path: str | None) -> EvalReport | None:
    if path is None:
        return None
    try:
        return EvalReport.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvalDatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise EvalDatasetError(f"{path}: not an eval report (report.json): {first}") from None


async def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    dataset = load_dataset(Path(args.dataset))
    baseline = _baseline(args.baseline)  # both checked before anything runs
    client = await _client(settings)
    print(f"running {len(dataset.cases)} case(s) of {dataset.name}", file=sys.stderr, flush=True)
    report = await run_eval(client, dataset, args.concurrency, progress=sys.stderr.isatty())
    comparison = compare(report, baseline) if baseline is not None else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
    (out / "junit.xml").write_text(report.junit(), encoding="utf-8")
    (out / "report.html").write_text(report.html(comparison), encoding="utf-8")
    for case in report.cases:
        verdict = "pass" if case.passed else ("error" if case.error else "FAIL")
        failed = [f"{c.name} ({c.reason})" for c in case.checks if not c.passed]
        detail = case.error or ", ".join(failed)
        print(f"{verdict:5} {case.name}" + (f": {detail}" if detail else ""))
    print(f"{report.passed}/{len(report.cases)} passed; reports in {out}/")
    if comparison is None:
        return EXIT_OK if report.passed == len(report.cases) else EXIT_RUN_NOT_COMPLETED
    for name in comparison.regressions:
        print(f"regressed: {name}")
    for name in comparison.improvements:
        print(f"improved: {name}")
    print(
        f"against the baseline: {len(comparison.regressions)} regression(s), "
        f"{len(comparison.improvements)} improvement(s)"
    )
    return EXIT_RUN_NOT_COMPLETED if comparison.regressions else EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `eval`."""
    p = parsers.add("eval", cmd_eval)
    p.add_argument("dataset", help="a dataset of cases (TOML or JSONL)")
    p.add_argument("--baseline", default=None, metavar="REPORT", help="an earlier report.json")
    p.add_argument("--out", default="eval-report", metavar="DIR", help="where reports go")
    p.add_argument("--concurrency", type=int, default=4, help="cases running at once")
