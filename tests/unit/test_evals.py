"""Eval datasets and reports (issue 32), without runs: every mistake in a dataset is one line
naming the case and the field, before anything runs; checks, comparisons and JUnit XML."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from xml.etree import ElementTree

import pytest

from capstan.client.evals import (
    CaseOutcome,
    CaseReport,
    CheckResult,
    EvalDatasetError,
    EvalReport,
    Expect,
    ToolUse,
    checks,
    compare,
    load_dataset,
)
from capstan.core.spec import TerminalReason


def dataset(tmp_path: Path, text: str, name: str = "d.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '[[case]]\nname = "a"\ntask = "t"\nexpekt = {}\n',
            "case 'a': expekt: unknown field 'expekt' (did you mean 'expect'?)",
        ),
        (
            '[[case]]\nname = "a"\ntask = "t"\nexpect = { output_contans = ["x"] }\n',
            "case 'a': expect.output_contans",
        ),
        (
            '[[case]]\nname = "a"\ntask = "t"\nspec = { max_stepz = 3 }\n',
            "case 'a': spec.max_stepz",
        ),
        (
            '[[case]]\nname = "a"\ntask = "t"\nspec = { workspace = "x" }\n',
            "case 'a': spec.workspace",
        ),
        (
            '[[case]]\nname = "a"\ntask = "t"\nfixtures = { "in.csv" = "nope.csv" }\n',
            "case 'a': fixtures.in.csv: nope.csv does not exist",
        ),
        ('[[case]]\nname = "a"\ntask = "t"\n[[case]]\nname = "a"\ntask = "u"\n', "case 'a': name"),
        ('[[case]]\ntask = "t"\n', "case 1: name: Field required"),
        ("defaults = {}\n", "case: Field required"),
        ("[[case]\n", "not valid TOML"),
    ],
)
def test_a_bad_dataset_is_one_line_naming_the_case_and_field(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(EvalDatasetError) as raised:
        load_dataset(dataset(tmp_path, text))
    message = str(raised.value)
    assert problem in message and "\n" not in message and message.startswith(str(tmp_path))


def test_jsonl_datasets_and_fixtures(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text("1,2")
    path = dataset(
        tmp_path,
        '{"name": "a", "task": "t", "fixtures": {"in.csv": "in.csv"}}\n'
        '\n{"name": "b", "task": "u"}\n',
        "cases.jsonl",
    )
    loaded = load_dataset(path)
    assert [c.name for c in loaded.cases] == ["a", "b"] and loaded.name == "cases"


def outcome(**fields: object) -> CaseOutcome:
    base: dict[str, object] = {
        "run_id": "r",
        "terminal_reason": TerminalReason.COMPLETED,
        "output": '{"total": 3, "items": [{"name": "a"}]}',
        "error": None,
        "steps": 2,
        "cost_usd": 0.01,
        "tools": [
            ToolUse(name="read_file", arguments={"path": "a"}),
            ToolUse(name="write_file", arguments={"path": "b", "content": "x"}),
        ],
    }
    return CaseOutcome.model_validate({**base, **fields})


def verdicts(expect: Expect, o: CaseOutcome) -> dict[str, bool]:
    return {name: bool(fn(o)[0]) for name, fn in checks(expect)}


def test_every_expectation_passes_and_fails() -> None:
    expect = Expect.model_validate(
        {
            "output_contains": ["total"],
            "output_regex": r'"total":\s*3',
            "output_json": {"total": 3, "items.0.name": "a"},
            "tools_called": ["write_file"],
            "tools_not_called": ["run_shell"],
            "tool_order": ["read_file", "write_file"],
            "tool_args": [{"tool": "write_file", "args": {"path": "b"}}],
            "max_steps": 2,
            "max_cost": 0.05,
        }
    )
    assert all(verdicts(expect, outcome()).values())
    worse = outcome(
        output='{"total": 4, "items": []}',
        steps=5,
        cost_usd=1.0,
        tools=[
            ToolUse(name="write_file", arguments={"path": "c"}),
            ToolUse(name="run_shell", arguments={}),
        ],
    )
    failed = {n for n, ok in verdicts(expect, worse).items() if not ok}
    assert failed == {
        "output_regex",
        "output_json:total",
        "output_json:items.0.name",
        "tool_not_called:run_shell",
        "tool_order",
        "tool_args:write_file",
        "max_steps",
        "max_cost",
    }
    # nothing expected: the run must complete
    assert verdicts(Expect(), outcome(terminal_reason=TerminalReason.MAX_STEPS)) == {
        "terminal_reason": False
    }


def report(**passed: bool) -> EvalReport:
    return EvalReport(
        dataset="d",
        started=datetime(2026, 1, 1, tzinfo=UTC),
        cases=[
            CaseReport(
                name=n,
                passed=ok,
                checks=[CheckResult(name="c", passed=ok, reason=None if ok else "no")],
            )
            for n, ok in passed.items()
        ],
    )


def test_a_comparison_names_regressions_and_improvements() -> None:
    before = report(a=True, b=False, c=True, gone=True)
    now = report(a=False, b=True, c=True, new=False)
    got = compare(now, before)
    assert (got.regressions, got.improvements, got.new, got.removed) == (
        ["a"],
        ["b"],
        ["new"],
        ["gone"],
    )
    suite = ElementTree.fromstring(now.junit())
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    assert "regressed" in now.html(got) and "<script" not in now.html(got)
