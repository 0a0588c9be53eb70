"""`capstan eval` (issue 32): five cases as real runs against the fake provider, then the same
dataset after a change to the "model" that breaks two of them: two regressions, exit 1."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from capstan.testing.fake_provider import Reply, call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server

DATASET = """
defaults = { max_steps = 6 }

[[case]]
name = "greets"
task = "greet"
expect = { output_contains = ["hello"] }

[[case]]
name = "writes notes"
task = "write"
[case.expect]
tools_called = ["write_file"]
tool_args = [{ tool = "write_file", args = { path = "notes.txt" } }]

[[case]]
name = "a denied write ends well"
task = "write"
decisions = "deny"
expect = { terminal_reason = "completed", tools_called = ["write_file"], max_steps = 3 }

[[case]]
name = "counts"
task = "count"
expect = { output_json = { total = 3, "items.0.name" = "a" } }

[[case]]
name = "reads its fixture"
task = "read"
fixtures = { "data.csv" = "fixtures/data.csv" }
expect = { tool_order = ["read_file"], output_contains = ["1,2"] }
"""


def _model(version: dict[str, int]) -> Any:
    """The scripted model, by task; version 2 answers two of the tasks differently."""

    def reply(step: int, messages: list[dict[str, Any]]) -> Reply:
        task = next(m["content"] for m in messages if m["role"] == "user")
        last = messages[-1]
        if task == "greet":
            return say(call("finish", answer="hello there" if version["v"] == 1 else "bye"))
        if task == "count":
            total = 3 if version["v"] == 1 else 4
            return say(
                call("finish", answer=json.dumps({"total": total, "items": [{"name": "a"}]}))
            )
        if step == 0 and task == "write":
            return say(call("write_file", path="notes.txt", content="x"))
        if step == 0 and task == "read":
            return say(call("read_file", path="data.csv"))
        return say(call("finish", answer=str(last.get("content"))))

    return reply


async def test_an_eval_then_a_change_that_breaks_two_cases(agent: Agent, tmp_path: Path) -> None:
    dataset = tmp_path / "support.toml"
    dataset.write_text(DATASET)
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "data.csv").write_text("a,b\n1,2\n")
    version = {"v": 1}
    async with agent.serving(_model(version)):
        first = await asyncio.to_thread(
            run_cli, agent.settings, "eval", str(dataset), "--out", str(tmp_path / "one")
        )
        version["v"] = 2
        second = await asyncio.to_thread(
            run_cli,
            agent.settings,
            "eval",
            str(dataset),
            "--out",
            str(tmp_path / "two"),
            "--baseline",
            str(tmp_path / "one" / "report.json"),
        )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "5/5 passed" in first.stdout
    assert second.returncode == 1, second.stdout + second.stderr
    assert "regressed: greets" in second.stdout and "regressed: counts" in second.stdout
    assert "2 regression(s), 0 improvement(s)" in second.stdout
    report = json.loads((tmp_path / "two" / "report.json").read_text())
    verdicts = {c["name"]: c["passed"] for c in report["cases"]}
    assert verdicts == {
        "greets": False,
        "writes notes": True,
        "a denied write ends well": True,
        "counts": False,
        "reads its fixture": True,
    }
    suite = ElementTree.fromstring((tmp_path / "two" / "junit.xml").read_text())
    assert suite.get("tests") == "5" and suite.get("failures") == "2"
    page = (tmp_path / "two" / "report.html").read_text()
    assert "3/5 passed" in page and "regressed" in page


RUBRIC = """
[[case]]
name = "polite"
task = "be polite"
expect = { rubric = { criteria = "The answer is kind." } }

[[case]]
name = "rude"
task = "be rude"
expect = { rubric = { criteria = "The answer is kind." } }
"""


def _judged_model(step: int, messages: list[dict[str, Any]]) -> Reply:
    """The agent answers by its task; the judge (its own run, typed) passes a kind answer."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    if task.startswith("Criteria:"):
        kind = "kind friend" in task.split("The agent's answer:", 1)[1]
        return say(call("finish", answer={"pass": kind, "reason": "kind" if kind else "unkind"}))
    answer = "hello, kind friend" if task == "be polite" else "go away"
    return say(call("finish", answer=answer))


async def test_a_rubric_is_judged_by_a_run_of_its_own(agent: Agent, tmp_path: Path) -> None:
    dataset = tmp_path / "rubric.toml"
    dataset.write_text(RUBRIC)
    async with agent.serving(_judged_model):
        shown = await asyncio.to_thread(
            run_cli, agent.settings, "eval", str(dataset), "--out", str(tmp_path / "r")
        )
    assert shown.returncode == 1, shown.stdout + shown.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (polite, rude) = report["cases"]
    assert polite["passed"] and not rude["passed"], json.dumps(report)
    (check,) = rude["checks"]
    assert check["name"] == "rubric" and check["reason"].startswith("unkind (judge run judge-")


async def test_cases_from_recorded_runs_catch_a_changed_trajectory(
    agent: Agent, tmp_path: Path
) -> None:
    """Two recorded runs become cases (their task, their outcome as the expectation); the
    same model passes them; a model that no longer writes fails the writing one."""
    version = {"v": 1}

    def model(step: int, messages: list[dict[str, Any]]) -> Reply:
        task = next(m["content"] for m in messages if m["role"] == "user")
        if task == "write" and step == 0 and version["v"] == 1:
            return say(call("write_file", path="notes.txt", content="x"))
        return say(call("finish", answer=f"done: {task}"))

    since = datetime.now(UTC).isoformat()
    async with agent.serving(model) as live:
        recorded = []
        for task in ("write", "greet"):
            run_id = await live.start(agent.spec(task, auto_approve=True))
            await asyncio.wait_for(live.client.result(run_id), 60)
            recorded.append(run_id)
        for _ in range(100):  # until visibility lists both as closed
            listed = {r.run_id: r.status async for r in live.client.list_runs(limit=20)}
            if all(listed.get(r) == "completed" for r in recorded):
                break
            await asyncio.sleep(0.1)
        dataset = tmp_path / "recorded.jsonl"
        made = await asyncio.to_thread(
            run_cli,
            agent.settings,
            "eval",
            "--from-runs",
            "--write",
            str(dataset),
            "--since",
            since,
        )
        same = await asyncio.to_thread(
            run_cli, agent.settings, "eval", str(dataset), "--out", str(tmp_path / "same")
        )
        version["v"] = 2
        changed = await asyncio.to_thread(
            run_cli,
            agent.settings,
            "eval",
            str(dataset),
            "--out",
            str(tmp_path / "changed"),
            "--baseline",
            str(tmp_path / "same" / "report.json"),
        )
        before = len(live.fake.requests)
        forked = await asyncio.to_thread(
            run_cli,
            agent.settings,
            "eval",
            str(dataset),
            "--out",
            str(tmp_path / "forked"),
            "--fork-at",
            "1",
        )
        forked_calls = len(live.fake.requests) - before
    # as forks after step 1 the recorded write is in the prefix: both pass, one call each
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert forked_calls == 2, (tmp_path / "forked" / "report.json").read_text()
    assert made.returncode == 0 and "2 case(s)" in made.stdout, made.stdout + made.stderr
    cases = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert {c["task"] for c in cases} == {"write", "greet"}
    assert all(c["from_run"] == c["name"] for c in cases)
    assert same.returncode == 0, same.stdout + same.stderr
    assert changed.returncode == 1 and "1 regression(s)" in changed.stdout, changed.stdout
