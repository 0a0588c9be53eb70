"""Replay every stored history against the current workflow code.

A change to the loop or the workflow that alters the command sequence of an existing history
fails here; gate such a change with `workflow.patched()` (see the README). Histories from earlier
versions are kept. `tests/histories/broken/` holds histories that must fail to replay: one with an
activity renamed, and one recorded before the retired replay modes (`tool-policy-v1`,
`context-v1`, `guards-v1`: every run now has tool policy, context management and guards; the
patch calls are deprecated, so histories that carry the markers still replay).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from capstan.core.agent_input import AgentInput
from capstan.core.effects import Outcome, RunTools
from capstan.core.spec import RunResult
from capstan.workflows.agent import AgentWorkflow

HISTORIES = Path(__file__).parent / "histories"
GOOD = sorted(HISTORIES.glob("*.json"))
BROKEN = sorted((HISTORIES / "broken").glob("*.json"))


def _load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def _replayer() -> Replayer:
    return Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)


def test_there_are_histories_to_replay() -> None:
    assert len(GOOD) >= 5 and BROKEN


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
async def test_history_replays(path: Path) -> None:
    result = await _replayer().replay_workflow(_load(path), raise_on_replay_failure=True)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
async def test_broken_history_fails_replay(path: Path) -> None:
    with pytest.raises(NondeterminismError):
        await _replayer().replay_workflow(_load(path))


def test_broken_history_differs_from_its_source_only_in_one_activity_type() -> None:
    """The broken fixture is the parallel-tools history with one activity renamed."""
    good = json.loads((HISTORIES / "parallel_tools.json").read_text())
    bad = json.loads((HISTORIES / "broken" / "parallel_tools_renamed_activity.json").read_text())
    diffs = [(g, b) for g, b in zip(good["events"], bad["events"], strict=True) if g != b]
    assert len(diffs) == 1


def test_a_legacy_history_is_kept_as_broken() -> None:
    """The retired modes are gone for good: the history from before them fails (above)."""
    legacy = json.loads((HISTORIES / "broken" / "legacy_modes_parallel_tools.json").read_text())
    markers = [e for e in legacy["events"] if "markerRecordedEventAttributes" in e]
    assert markers == []


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class ToolsOneAtATime(AgentWorkflow):
    """A change as it would be without `workflow.patched`: a turn's tools run one at a time."""

    @workflow.run
    async def run(self, start: AgentInput) -> RunResult:
        return await super().run(start)

    async def _run_tools(self, effect: RunTools) -> Outcome:
        one = RunTools(calls=effect.calls, concurrency=1, timeouts=effect.timeouts)
        return await super()._run_tools(one)


async def test_loop_change_without_patch_fails_replay() -> None:
    replayer = Replayer(workflows=[ToolsOneAtATime], data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(_load(HISTORIES / "parallel_tools.json"))
