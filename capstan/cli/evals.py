"""`capstan eval DATASET`: run a dataset's cases as real runs, score them, report, compare.

The logic is in `capstan.client.evals`. Exit 0 when nothing regressed against `--baseline`
(without one: when every case passed), 1 otherwise, 2 for a dataset that cannot be run.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from capstan.cli.commands import EXIT_OK, EXIT_RUN_NOT_COMPLETED, Parsers
from capstan.cli.support import client_for as _client
from capstan.client.evals import (
    EvalDatasetError,
    EvalReport,
    cases_from_runs,
    compare,
    dataset_lines,
    load_dataset,
    run_eval,
)
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


def _since(text: str) -> datetime:
    """`7d`, `12h` (back from now) or an ISO date (checked before anything connects)."""
    match = re.fullmatch(r"(\d+)([dh])", text)
    if match:
        amount = int(match.group(1))
        delta = timedelta(days=amount) if match.group(2) == "d" else timedelta(hours=amount)
        return datetime.now(UTC) - delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give 7d, 12h or an ISO date") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def cmd_from_runs(args: argparse.Namespace, settings: Settings) -> int:
    if args.write is None:
        raise EvalDatasetError("--from-runs writes a dataset: name it with --write FILE.jsonl")
    client = await _client(settings)
    cases = await cases_from_runs(
        client, limit=args.limit, terminal_reason=args.reason, agent=args.agent, since=args.since
    )
    Path(args.write).write_text(dataset_lines(cases), encoding="utf-8")
    print(f"{len(cases)} case(s) from recorded runs in {args.write}")
    return EXIT_OK


async def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    if args.from_runs:
        return await cmd_from_runs(args, settings)
    if args.dataset is None:
        raise EvalDatasetError("name a dataset (TOML or JSONL), or make one with --from-runs")
    dataset = load_dataset(Path(args.dataset))
    if args.fork_at is not None:  # the cases made from recorded runs, as forks after that step
        cases = [
            c.model_copy(update={"fork_at": args.fork_at})
            if c.from_run and c.fork_at is None
            else c
            for c in dataset.cases
        ]
        dataset = dataset.model_copy(update={"cases": cases})
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
    p.add_argument("dataset", nargs="?", default=None, help="a dataset of cases (TOML or JSONL)")
    p.add_argument("--baseline", default=None, metavar="REPORT", help="an earlier report.json")
    p.add_argument("--out", default="eval-report", metavar="DIR", help="where reports go")
    p.add_argument("--concurrency", type=int, default=4, help="cases running at once")
    p.add_argument(
        "--fork-at",
        type=int,
        default=None,
        metavar="N",
        help="run cases made from recorded runs as forks after step N (the prefix not paid)",
    )
    made = p.add_argument_group("making a dataset from recorded runs")
    made.add_argument(
        "--from-runs", action="store_true", help="write recorded runs as cases (--write)"
    )
    made.add_argument("--write", default=None, metavar="FILE", help="the JSONL dataset to write")
    made.add_argument("--reason", default=None, help="only runs that ended with this reason")
    made.add_argument("--agent", default=None, help="only runs of this agent definition")
    made.add_argument("--since", type=_since, default=None, help="7d, 12h or an ISO date")
    made.add_argument("--limit", type=int, default=50, help="at most this many cases")
