"""The audit reads whether an execution continued another from Temporal's own record of it (the
started event's initiator: the workflow continued itself as new), not by decoding the state it
carries (which would load the loop's types into every audit): on every stored history the two
agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.client import WorkflowHistory

from capstan.audit.history import decode_history
from capstan.audit.trail import build_trail
from capstan.core.agent_input import AgentInput
from capstan.runtime.blobstore import ContentStore

BY_WORKFLOW = ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW
HISTORIES = sorted((Path(__file__).parents[1] / "histories").glob("*.json"))


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_continued_is_what_the_carried_state_said(path: Path, tmp_path: Path) -> None:
    history = _history(path)
    started = history.events[0].workflow_execution_started_event_attributes
    carried = AgentInput.model_validate_json(started.input.payloads[0].data).carried
    (entry,) = [e for e in decode_history(history) if e.kind == "run_started"]
    records, _ = build_trail([[entry]], ContentStore(tmp_path))
    assert records[0]["continued"] is (carried is not None)


def test_the_stored_histories_hold_continued_executions() -> None:
    """The check above means something only if some stored history continued another."""
    starts = [_history(p).events[0].workflow_execution_started_event_attributes for p in HISTORIES]
    continued = [a for a in starts if a.initiator == BY_WORKFLOW]
    assert len(continued) >= 3
