"""Evals: a dataset of cases run as real runs, scored, reported and compared with a baseline.

A dataset (TOML, `[[case]]` tables, or JSONL, one case a line) names for each case its task, the
spec fields it changes, the workspace files it starts with, how its approvals are decided, and
what is expected: of the output (equals, contains, a regex, values at JSON paths), of the
trajectory (tools called or not, in which order, with which arguments, at most N steps, at most
$X) and of the terminal reason. Each case is a real run on the workers (`max_concurrency` at
once); pydantic-evals runs the cases and the checks (`Dataset`, `Case`, `Evaluator`) and this
module turns its report into Capstan's (`EvalReport`: JSON, JUnit XML, HTML) and compares it
with a baseline: a case that passed there and fails now is a regression.

    dataset = load_dataset(Path("evals/support.toml"))
    report = await run_eval(client, dataset)
    compare(report, EvalReport.model_validate_json(Path("baseline.json").read_text()))

pydantic-evals is imported where it is used (`capstan[evals]`): nothing else pays for it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tomllib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree

from pydantic import AliasChoices, BaseModel, Field, ValidationError

from capstan.client.runs import CapstanClient
from capstan.client.transcript import build_transcript
from capstan.core.errors import CapstanError
from capstan.core.spec import INTERNAL_FIELDS, RunSpec, TerminalReason
from capstan.core.strict import StrictModel
from capstan.core.tenants import workspace_subdir

__all__ = [
    "CaseOutcome",
    "CaseReport",
    "Comparison",
    "EvalCase",
    "EvalDataset",
    "EvalDatasetError",
    "EvalReport",
    "Expect",
    "cases_from_runs",
    "compare",
    "dataset_lines",
    "load_dataset",
    "run_eval",
]


class EvalDatasetError(CapstanError):
    """A dataset that cannot be run: one line naming the file, the case and the field."""


class ToolArgs(StrictModel):
    """A call of `tool` whose arguments include every key of `args` with that value."""

    tool: str
    args: dict[str, Any]


class Rubric(StrictModel):
    """A judgement of the output by a model: a run of its own (`judge`, a model profile), with
    no tools, that answers `{"pass": bool, "reason": str}` against `criteria`."""

    criteria: str = Field(min_length=1)
    judge: str = "default"


JUDGE_SYSTEM = (
    "You grade the answer an agent gave to a task against the criteria you are given. Judge "
    "only what the answer says. Call finish with `pass` (true when every criterion holds) and "
    "a one-sentence `reason`."
)
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pass": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["pass", "reason"],
    "additionalProperties": False,
}


class Expect(StrictModel):
    """What a case expects. Every check given must hold; none given: the run completes."""

    terminal_reason: TerminalReason | None = None
    output_equals: str | None = None
    output_contains: list[str] = []
    output_regex: str | None = None
    #: dotted paths into the output read as JSON (`items.0.name`) and the value each must have
    output_json: dict[str, Any] = {}
    tools_called: list[str] = []
    tools_not_called: list[str] = []
    #: these tools are called in this order (others may come between)
    tool_order: list[str] = []
    tool_args: list[ToolArgs] = []
    max_steps: int | None = Field(None, ge=0)
    max_cost: float | None = Field(None, ge=0)
    rubric: Rubric | None = None


class EvalCase(StrictModel):
    """One case: a run of `task` with `spec` over the dataset's defaults."""

    name: str = Field(min_length=1, max_length=200)
    task: str = Field(min_length=1)
    spec: dict[str, Any] = {}
    #: workspace files the run starts with: path -> content
    files: dict[str, str] = {}
    #: workspace files copied from files next to the dataset: path in the workspace -> source
    fixtures: dict[str, str] = {}
    #: how approval requests are decided, in the order they open (the last repeats)
    decisions: Literal["approve", "deny"] | list[Literal["approve", "deny"]] = "approve"
    #: answers to `ask_user` questions, in order (none left: the question is denied)
    answers: list[str] = []
    expect: Expect = Expect()
    #: the recorded run this case was made from (`cases_from_runs`): `capstan fork` replays it
    from_run: str | None = None
    #: run the case as a fork of `from_run` after this step (`capstan.client.forks`): the
    #: recorded prefix is not paid again, only what comes after it is evaluated
    fork_at: int | None = Field(None, ge=0)


class EvalDataset(StrictModel):
    """A dataset: RunSpec fields for every case (`defaults`), and the cases."""

    name: str = "dataset"
    defaults: dict[str, Any] = {}
    cases: list[EvalCase] = Field(validation_alias=AliasChoices("case", "cases"), min_length=1)
    #: where the dataset was read from (fixtures are relative to it)
    folder: Path = Path(".")


def _problem(where: str, exc: ValidationError, data: Any) -> str:
    first = exc.errors()[0]
    loc = list(first["loc"])
    if loc and loc[0] in ("case", "cases") and len(loc) > 1 and isinstance(loc[1], int):
        index = loc[1]
        listed = data.get("case", data.get("cases")) if isinstance(data, dict) else None
        cases: list[Any] = listed if isinstance(listed, list) else []
        entry = cases[index] if index < len(cases) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        who = f"case {name!r}" if isinstance(name, str) else f"case {index + 1}"
        field = ".".join(str(p) for p in loc[2:]) or "(the case)"
        return f"{where}: {who}: {field}: {first['msg']}"
    field = ".".join(str(p) for p in loc) or "(the dataset)"
    return f"{where}: {field}: {first['msg']}"


def load_dataset(path: Path) -> EvalDataset:
    """A dataset from TOML or JSONL, checked whole before anything runs: an unknown field, a
    spec field no run takes, a missing fixture or a repeated case name is one line naming the
    case and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvalDatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    data: dict[str, Any]
    try:
        if path.suffix == ".jsonl":
            lines = [line for line in text.splitlines() if line.strip()]
            data = {"name": path.stem, "cases": [json.loads(line) for line in lines]}
        else:
            data = {"name": path.stem, **tomllib.loads(text)}
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "JSONL" if path.suffix == ".jsonl" else "TOML"
        raise EvalDatasetError(f"{path}: not valid {kind}: {exc}") from None
    try:
        dataset = EvalDataset.model_validate({**data, "folder": path.parent})
    except ValidationError as exc:
        raise EvalDatasetError(_problem(str(path), exc, data)) from None
    seen: set[str] = set()
    for case in dataset.cases:
        if case.name in seen:
            raise EvalDatasetError(f"{path}: case {case.name!r}: name: used by another case")
        seen.add(case.name)
        if case.fork_at is not None and case.from_run is None:
            raise EvalDatasetError(
                f"{path}: case {case.name!r}: fork_at: needs from_run, the run to fork"
            )
        for workspace_path, source in case.fixtures.items():
            if not (dataset.folder / source).is_file():
                raise EvalDatasetError(
                    f"{path}: case {case.name!r}: fixtures.{workspace_path}: {source} does not "
                    f"exist (relative to {dataset.folder})"
                )
        try:
            _spec(dataset, case)
        except EvalDatasetError as exc:
            raise EvalDatasetError(f"{path}: {exc}") from None
    return dataset


def _spec(dataset: EvalDataset, case: EvalCase) -> RunSpec:
    fields = {**dataset.defaults, **case.spec}
    if internal := sorted(set(fields) & (INTERNAL_FIELDS | {"task", "run_id"})):
        raise EvalDatasetError(f"case {case.name!r}: spec.{internal[0]}: not a field a case sets")
    try:
        return RunSpec.model_validate({**fields, "task": case.task})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise EvalDatasetError(f"case {case.name!r}: spec.{field}: {first['msg']}") from None


# From production --------------------------------------------------------------------------------

#: runs the eval machinery starts itself: never made into cases
_EVAL_PREFIXES = ("eval-", "judge-")


async def cases_from_runs(
    client: CapstanClient,
    *,
    limit: int = 50,
    terminal_reason: str | None = None,
    agent: str | None = None,
    since: datetime | None = None,
) -> list[EvalCase]:
    """Recorded runs as cases, newest first: each run's task and spec, and its outcome as the
    expectation (its terminal reason, the tools it called, and for a typed answer the answer
    itself), so a change is checked against the work the agent really did."""
    cases: list[EvalCase] = []
    async for summary in client.list_runs(limit=10 * limit, terminal_reason=terminal_reason):
        if len(cases) >= limit:
            break
        if summary.status != "completed" or summary.run_id.startswith(_EVAL_PREFIXES):
            continue
        # a listing gives start times to the second: a run of that second is in
        if since is not None and datetime.fromisoformat(summary.started) < since.replace(
            microsecond=0
        ):
            break  # newest first: the rest are older
        case = await _case_of(client, summary.run_id, agent)
        if case is not None:
            cases.append(case)
    return cases


async def _case_of(client: CapstanClient, run_id: str, agent: str | None) -> EvalCase | None:
    spec = await client.started_spec(run_id)
    if spec is None:
        return None
    if (agent is not None and spec.agent != agent) or spec.thread is not None:
        return None
    result = await client.result(run_id)
    steps = build_transcript(client.content(), await client.transcript_view(run_id))
    called = sorted({call.name for step in steps for call in step.tool_calls} - {"finish"})
    expect: dict[str, Any] = {"terminal_reason": result.terminal_reason, "tools_called": called}
    if result.output_format == "json" and result.output is not None:
        expect["output_equals"] = client.content().resolve(result.output)
    public = spec.model_dump(exclude_unset=True, exclude=set(INTERNAL_FIELDS) | {"task", "run_id"})
    task = spec.task or ""
    if not task:
        return None
    return EvalCase.model_validate(
        {"name": run_id, "task": task, "spec": public, "expect": expect, "from_run": run_id}
    )


def dataset_lines(cases: list[EvalCase]) -> str:
    """A JSONL dataset of `cases` (`capstan eval --from-runs --write`)."""
    return "".join(case.model_dump_json(exclude_defaults=True) + "\n" for case in cases)


# Running ---------------------------------------------------------------------------------------


class ToolUse(BaseModel):
    name: str
    arguments: dict[str, Any] | None


class Judgement(BaseModel):
    """A judge run's verdict on a case's output (`Rubric`)."""

    run_id: str
    passed: bool
    reason: str


class CaseOutcome(BaseModel):
    """What a case's run did, as the checks read it."""

    run_id: str
    terminal_reason: TerminalReason
    output: str | None
    error: str | None
    steps: int
    cost_usd: float
    tools: list[ToolUse]
    judgement: Judgement | None = None


@dataclass
class _Decider:
    """Decides a case's requests as its script says, while its run goes on."""

    case: EvalCase
    decided: int = 0
    answered: int = 0

    def next_decision(self) -> Literal["approve", "deny"]:
        script = self.case.decisions
        if isinstance(script, str):
            return script
        chosen = script[min(self.decided, len(script) - 1)] if script else "approve"
        self.decided += 1
        return chosen

    def next_answer(self) -> str | None:
        if self.answered >= len(self.case.answers):
            return None
        self.answered += 1
        return self.case.answers[self.answered - 1]


async def _steer_until_done(client: CapstanClient, run_id: str, case: EvalCase) -> None:
    decider = _Decider(case)
    done: set[str] = set()
    while True:
        pending = await client.pending(run_id)
        for request in pending.approvals:
            if request.request_id in done:
                continue
            done.add(request.request_id)
            action = decider.next_decision()
            reason = "" if action == "approve" else "the eval's script denies it"
            await client.decide(run_id, action, request.request_id, reason=reason)
        for question in pending.questions:
            if question.request_id in done:
                continue
            done.add(question.request_id)
            answer = decider.next_answer()
            await client.answer(run_id, question.request_id, answer or "(no scripted answer)")
        await asyncio.sleep(0.2)


def _prepare_workspace(
    client: CapstanClient, dataset: EvalDataset, case: EvalCase, key: str
) -> None:
    """The case's own workspace, with its files (the eval must see the workers' filesystem)."""
    root = client.settings.workspace_dir / workspace_subdir(key)
    root.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    for name, source in case.fixtures.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dataset.folder / source, target)


async def run_case(client: CapstanClient, dataset: EvalDataset, case: EvalCase) -> CaseOutcome:
    """Run one case to its end, deciding its requests as scripted."""
    run_id = f"eval-{uuid.uuid4().hex[:12]}"
    key = f"evals/{run_id}"
    await asyncio.to_thread(_prepare_workspace, client, dataset, case, key)
    spec = _spec(dataset, case)
    if case.fork_at is not None and case.from_run is not None:
        from capstan.client.forks import fork_spec

        changes = {**dataset.defaults, **case.spec}
        spec = await fork_spec(client, case.from_run, case.fork_at, overrides=changes)
    await client.start_run(spec.model_copy(update={"run_id": run_id, "workspace": key}))
    steering = asyncio.ensure_future(_steer_until_done(client, run_id, case))
    try:
        result = await client.result(run_id)
    finally:
        steering.cancel()
    view = await client.transcript_view(run_id)
    content = client.content()
    steps = await asyncio.to_thread(build_transcript, content, view)
    tools = [
        ToolUse(name=call.name, arguments=_json_object(call.executed_arguments or call.arguments))
        for step in steps
        for call in step.tool_calls
    ]
    output = (
        None if result.output is None else await asyncio.to_thread(content.resolve, result.output)
    )
    rubric = case.expect.rubric
    judgement = await _judged(client, case, rubric, output) if rubric is not None else None
    return CaseOutcome(
        judgement=judgement,
        run_id=run_id,
        terminal_reason=result.terminal_reason,
        output=output,
        error=result.error,
        steps=result.steps,
        cost_usd=result.usage.cost_usd,
        tools=tools,
    )


async def _judged(
    client: CapstanClient, case: EvalCase, rubric: Rubric, output: str | None
) -> Judgement:
    """A run of the judge's model on the case's task and output; it answers typed JSON."""
    task = (
        f"Criteria:\n{rubric.criteria}\n\nThe task the agent was given:\n{case.task}\n\n"
        f"The agent's answer:\n{output if output is not None else '(no answer)'}"
    )
    spec = RunSpec(
        task=task,
        model=rubric.judge,
        system_prompt=JUDGE_SYSTEM,
        allowed_tools=(),
        max_steps=3,
        output_schema=JUDGE_SCHEMA,
        run_id=f"judge-{uuid.uuid4().hex[:12]}",
    )
    run_id = await client.start_run(spec)
    result = await client.result(run_id)
    verdict = client.output_data(result) if result.output_format == "json" else None
    if result.terminal_reason is not TerminalReason.COMPLETED or not isinstance(verdict, dict):
        why = result.error or "no verdict"
        return Judgement(run_id=run_id, passed=False, reason=f"the judge gave none: {why}")
    reason = str(verdict.get("reason", ""))
    return Judgement(run_id=run_id, passed=verdict.get("pass") is True, reason=reason)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# Checks ----------------------------------------------------------------------------------------


def _at_path(data: Any, path: str) -> tuple[bool, Any]:
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return False, None
    return True, data


def _in_order(called: list[str], order: list[str]) -> bool:
    it = iter(called)
    return all(any(name == want for name in it) for want in order)


def checks(expect: Expect) -> list[tuple[str, Any]]:
    """(name, how to check) for every expectation given; a case with none expects `completed`."""
    out: list[tuple[str, Any]] = []
    reason = expect.terminal_reason or (TerminalReason.COMPLETED if expect == Expect() else None)
    if reason is not None:

        def ended(o: CaseOutcome, r: TerminalReason = reason) -> tuple[bool, str]:
            return o.terminal_reason is r, f"ended {o.terminal_reason.value}, not {r.value}"

        out.append(("terminal_reason", ended))
    return out + _output_checks(expect) + _trajectory_checks(expect)


def _output_checks(expect: Expect) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if (want := expect.output_equals) is not None:
        out.append(
            (
                "output_equals",
                lambda o: (
                    (o.output or "").strip() == want.strip(),
                    f"output {(o.output or '')[:200]!r}",
                ),
            )
        )
    for text in expect.output_contains:
        out.append(
            (
                f"output_contains:{text}",
                lambda o, t=text: (t in (o.output or ""), f"{t!r} not in the output"),
            )
        )
    if expect.output_regex is not None:
        pattern = re.compile(expect.output_regex)
        out.append(
            (
                "output_regex",
                lambda o: (
                    pattern.search(o.output or "") is not None,
                    f"no match for {pattern.pattern!r}",
                ),
            )
        )
    for path, value in expect.output_json.items():

        def json_check(o: CaseOutcome, path: str = path, value: Any = value) -> tuple[bool, str]:
            try:
                data = json.loads(o.output or "")
            except ValueError:
                return False, "the output is not JSON"
            found, got = _at_path(data, path)
            return found and got == value, f"{path} is {got!r}" if found else f"no {path}"

        out.append((f"output_json:{path}", json_check))
    return out


def _trajectory_checks(expect: Expect) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for tool in expect.tools_called:
        out.append(
            (
                f"tool_called:{tool}",
                lambda o, t=tool: (any(u.name == t for u in o.tools), f"{t} was not called"),
            )
        )
    for tool in expect.tools_not_called:
        out.append(
            (
                f"tool_not_called:{tool}",
                lambda o, t=tool: (all(u.name != t for u in o.tools), f"{t} was called"),
            )
        )
    if order := expect.tool_order:
        out.append(
            (
                "tool_order",
                lambda o: (
                    _in_order([u.name for u in o.tools], order),
                    f"called {[u.name for u in o.tools]}",
                ),
            )
        )
    for item in expect.tool_args:

        def args_check(o: CaseOutcome, item: ToolArgs = item) -> tuple[bool, str]:
            hit = any(
                u.name == item.tool
                and u.arguments is not None
                and all(u.arguments.get(k) == v for k, v in item.args.items())
                for u in o.tools
            )
            return hit, f"no {item.tool} call with {item.args}"

        out.append((f"tool_args:{item.tool}", args_check))
    if (steps := expect.max_steps) is not None:
        out.append(("max_steps", lambda o: (o.steps <= steps, f"{o.steps} steps")))
    if (cost := expect.max_cost) is not None:
        out.append(("max_cost", lambda o: (o.cost_usd <= cost, f"${o.cost_usd:.4f}")))
    if expect.rubric is not None:

        def judged(o: CaseOutcome) -> tuple[bool, str]:
            if o.judgement is None:
                return False, "no judgement"
            return o.judgement.passed, f"{o.judgement.reason} (judge run {o.judgement.run_id})"

        out.append(("rubric", judged))
    return out


# Reports ---------------------------------------------------------------------------------------


class CheckResult(BaseModel):
    name: str
    passed: bool
    reason: str | None = None


class CaseReport(BaseModel):
    name: str
    passed: bool
    run_id: str | None = None
    terminal_reason: TerminalReason | None = None
    steps: int = 0
    cost_usd: float = 0.0
    duration_s: float = 0.0
    checks: list[CheckResult] = []
    #: the run could not be made (the case's run raised), not a failed check
    error: str | None = None


class EvalReport(BaseModel):
    """A dataset's results: one record a case, in the dataset's order."""

    dataset: str
    started: datetime
    cases: list[CaseReport]

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.passed)

    def junit(self) -> str:
        """JUnit XML for CI: a test case a case, a failure per failed check."""
        suite = ElementTree.Element(
            "testsuite",
            name=self.dataset,
            tests=str(len(self.cases)),
            failures=str(sum(1 for c in self.cases if not c.passed and c.error is None)),
            errors=str(sum(1 for c in self.cases if c.error is not None)),
            timestamp=self.started.isoformat(),
        )
        for case in self.cases:
            node = ElementTree.SubElement(
                suite,
                "testcase",
                classname=self.dataset,
                name=case.name,
                time=f"{case.duration_s:.3f}",
            )
            if case.error is not None:
                ElementTree.SubElement(node, "error", message=case.error[:500])
            for check in case.checks:
                if not check.passed:
                    ElementTree.SubElement(
                        node, "failure", message=f"{check.name}: {check.reason or 'failed'}"[:500]
                    )
        return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)

    def html(self, comparison: Comparison | None = None) -> str:
        """A page for people: each case, its checks, and what changed against the baseline."""
        changed = {n: "regressed" for n in (comparison.regressions if comparison else [])}
        changed |= {n: "improved" for n in (comparison.improvements if comparison else [])}
        rows = []
        for case in self.cases:
            failed = [f"{c.name}: {c.reason}" for c in case.checks if not c.passed]
            detail = case.error or "; ".join(failed) or "all checks pass"
            rows.append(
                "<tr class='{cls}'><td>{name}</td><td>{verdict}</td><td>{change}</td>"
                "<td>{reason}</td><td>{steps}</td><td>{run}</td><td>{detail}</td></tr>".format(
                    cls="pass" if case.passed else "fail",
                    name=escape(case.name),
                    verdict="pass" if case.passed else ("error" if case.error else "fail"),
                    change=escape(changed.get(case.name, "")),
                    reason=escape(case.terminal_reason.value if case.terminal_reason else "-"),
                    steps=case.steps,
                    run=escape(case.run_id or "-"),
                    detail=escape(detail),
                )
            )
        title = escape(f"{self.dataset}: {self.passed}/{len(self.cases)} passed")
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>{t}</title><style>"
            "body{{font-family:sans-serif}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;"
            "text-align:left}}.fail td{{background:#fde8e8}}.pass td{{background:#e8f5e9}}"
            "</style></head><body><h1>{t}</h1><p>started {s}</p><table><tr><th>case</th>"
            "<th>verdict</th><th>vs baseline</th><th>terminal reason</th><th>steps</th>"
            "<th>run</th><th>details</th></tr>{rows}</table></body></html>"
        ).format(t=title, s=escape(self.started.isoformat()), rows="".join(rows))


class Comparison(BaseModel):
    """A report against a baseline, by case name."""

    regressions: list[str] = []
    improvements: list[str] = []
    new: list[str] = []
    removed: list[str] = []


def compare(report: EvalReport, baseline: EvalReport) -> Comparison:
    before = {c.name: c.passed for c in baseline.cases}
    now = {c.name: c.passed for c in report.cases}
    return Comparison(
        regressions=[n for n, ok in now.items() if n in before and before[n] and not ok],
        improvements=[n for n, ok in now.items() if n in before and not before[n] and ok],
        new=[n for n in now if n not in before],
        removed=[n for n in before if n not in now],
    )


async def run_eval(
    client: CapstanClient, dataset: EvalDataset, max_concurrency: int = 4, progress: bool = False
) -> EvalReport:
    """Every case as a real run, at most `max_concurrency` at once, scored by pydantic-evals."""
    from pydantic_evals import Case, Dataset
    from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

    @dataclass
    class Check(Evaluator[EvalCase, CaseOutcome, None]):
        evaluation_name: str
        check: Any

        def get_default_evaluation_name(self) -> str:
            return self.evaluation_name

        def evaluate(self, ctx: EvaluatorContext[EvalCase, CaseOutcome, None]) -> EvaluationReason:
            ok, why = self.check(ctx.output)
            return EvaluationReason(value=bool(ok), reason=None if ok else why)

    cases = [
        Case(
            name=case.name,
            inputs=case,
            evaluators=[Check(evaluation_name=name, check=fn) for name, fn in checks(case.expect)],
        )
        for case in dataset.cases
    ]
    started = datetime.now(UTC)

    async def task(case: EvalCase) -> CaseOutcome:
        return await run_case(client, dataset, case)

    evaluated = await Dataset(name=dataset.name, cases=cases).evaluate(
        task, max_concurrency=max_concurrency, progress=progress
    )
    by_name: dict[str, CaseReport] = {}
    for done in evaluated.cases:
        outcome: CaseOutcome = done.output
        results = [
            CheckResult(name=name, passed=bool(r.value), reason=r.reason)
            for name, r in done.assertions.items()
        ]
        by_name[done.name] = CaseReport(
            name=done.name,
            passed=all(r.passed for r in results),
            run_id=outcome.run_id,
            terminal_reason=outcome.terminal_reason,
            steps=outcome.steps,
            cost_usd=outcome.cost_usd,
            duration_s=done.task_duration,
            checks=results,
        )
    for failure in evaluated.failures:
        by_name[failure.name] = CaseReport(
            name=failure.name, passed=False, error=failure.error_message
        )
    return EvalReport(
        dataset=dataset.name, started=started, cases=[by_name[c.name] for c in dataset.cases]
    )
