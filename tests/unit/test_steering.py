"""Steering in the pure loop: approvals, policy, pause, messages, questions, grants, expiry."""

from __future__ import annotations

import json
from datetime import timedelta

from capstan.core import loop
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    ModelDescribed,
    ModelReplied,
    RunTools,
    Steered,
    ToolsLoaded,
)
from capstan.core.policy import arguments_hash
from capstan.core.spec import RunSpec, TerminalReason, ToolRule
from capstan.core.state import RunState
from capstan.core.steering import (
    Answer,
    Decision,
    LiveMessage,
    PauseRequest,
    ResumeRequest,
    StepGrant,
)
from capstan.core.tooling import ToolInfo
from tests.unit.scripted import T0, Driver, call, catalog, chain, reply, started

SPEC = RunSpec(task="t", max_steps=6)
WRITE = call("write_file", path="a.txt", content="x")


def decide(state: RunState, action: str, **kw: object) -> Decision:
    request = state.turn.approvals[0]
    return Decision(
        request_id=request.request_id,
        args_hash=request.args_hash,
        action=action,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def scripted(*items: object):
    """A human that answers each wait with the next item (a list of inputs or a timedelta)."""
    queue = list(items)

    def human(state: RunState) -> list[object]:
        item = queue.pop(0)
        return item(state) if callable(item) else item  # type: ignore[no-any-return]

    return human


def test_write_waits_for_approval_then_runs() -> None:
    d = Driver(
        [reply("", WRITE), reply("", call("finish", answer="ok"))],
        human=scripted(lambda s: [decide(s, "approve", identity="alice")]),
    )
    result, state = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert [c.name for c in d.tool_inputs[0].calls] == ["write_file"]
    (record,) = state.steering.records
    assert record.action == "approve" and record.identity == "alice"
    assert record.request_id == "run-1/1/c1"
    assert record.args_hash == arguments_hash("write_file", WRITE.arguments)


def test_deny_reason_is_the_observation() -> None:
    d = Driver(
        [reply("", WRITE), reply("", call("finish", answer="ok"))],
        human=scripted(lambda s: [decide(s, "deny", reason="not today")]),
    )
    d.run(SPEC)
    assert d.tool_inputs[0].calls == ()
    (obs,) = d.model_inputs[1].request.new_messages
    assert obs.content == "Error (denied): denied by a reviewer: not today"


def test_edit_runs_with_new_arguments_and_tells_the_model() -> None:
    edited = json.dumps({"path": "b.txt", "content": "y"})
    d = Driver(
        [reply("", WRITE), reply("", call("finish", answer="ok"))],
        human=scripted(lambda s: [decide(s, "edit", arguments=edited)]),
    )
    _, state = d.run(SPEC)
    assert d.tool_inputs[0].calls[0].arguments == edited
    (obs,) = d.model_inputs[1].request.new_messages
    assert obs.note is not None and "b.txt" in obs.note
    assert state.steering.records[0].executed_arguments == edited


def test_invalid_or_denied_edits_are_rejected_as_diagnostics() -> None:
    spec = SPEC.model_copy(
        update={"tool_policy": {"write_file": ToolRule(deny_arguments={"path": "^secrets/"})}}
    )
    bad_schema = json.dumps({"path": 3})
    denied = json.dumps({"path": "secrets/key", "content": "x"})
    d = Driver(
        [reply("", WRITE), reply("", call("finish", answer="ok"))],
        human=scripted(
            lambda s: [
                decide(s, "edit", arguments=bad_schema, id="e1"),
                decide(s, "edit", arguments=denied, id="e2"),
                decide(s, "approve", id="e3"),
            ]
        ),
    )
    _, state = d.run(spec)
    assert "does not match the schema" in state.diagnostics[0] or "schema" in state.diagnostics[0]
    assert "policy denies write_file" in state.diagnostics[1]
    assert d.tool_inputs[0].calls[0].arguments == WRITE.arguments


def test_stale_duplicate_and_mismatched_decisions() -> None:
    def human(state: RunState) -> list[object]:
        good = decide(state, "approve", id="d1")
        return [
            Decision(request_id="run-1/9/zz", args_hash="x", action="approve", id="d0"),
            good.model_copy(update={"args_hash": "0" * 64, "id": "d2"}),
            good,
            good.model_copy(update={"action": "deny"}),  # same id: a duplicate, ignored
            good.model_copy(update={"id": "d3"}),  # consumed already: stale
        ]

    d = Driver([reply("", WRITE), reply("", call("finish", answer="ok"))], human=human)
    _, state = d.run(SPEC)
    assert len(d.tool_inputs[0].calls) == 1
    notes = " | ".join(state.diagnostics)
    assert "no open approval request 'run-1/9/zz'" in notes
    assert "hash mismatch" in notes
    assert "already decided" in notes
    assert len(state.diagnostics) == 3 and len(state.steering.records) == 1


def test_always_approves_the_tool_for_the_rest_of_the_run() -> None:
    script = [
        reply("", WRITE, call("write_file", call_id="c2", path="b", content="y")),
        reply("", call("write_file", call_id="c3", path="c", content="z")),
        reply("", call("finish", answer="ok")),
    ]
    d = Driver(script, human=scripted(lambda s: [decide(s, "always")]))
    _, state = d.run(SPEC)
    assert [len(e.calls) for e in d.tool_inputs] == [2, 1]
    assert state.steering.always == ("write_file",)
    assert [r.action for r in state.steering.records] == ["always", "always"]


def test_mixed_decisions_on_parallel_calls() -> None:
    script = [
        reply(
            "",
            WRITE,
            call("write_file", call_id="c2", path="b", content="y"),
            call("list_dir", call_id="c3"),
        ),
        reply("", call("finish", answer="ok")),
    ]

    def human(state: RunState) -> list[object]:
        first, second = state.turn.approvals
        return [
            Decision(request_id=first.request_id, args_hash=first.args_hash, action="approve"),
            Decision(
                request_id=second.request_id, args_hash=second.args_hash, action="deny", reason="no"
            ),
        ]

    d = Driver(script, human=human)
    d.run(SPEC)
    assert [c.call_id for c in d.tool_inputs[0].calls] == ["c1", "c3"]
    obs = d.model_inputs[1].request.new_messages
    assert [m.tool_call_id for m in obs] == ["c1", "c2", "c3"]
    assert "denied by a reviewer: no" in str(obs[1].content)


def test_policy_precedence_auto_approve_and_deny() -> None:
    spec = SPEC.model_copy(
        update={"auto_approve": True, "tool_policy": {"list_dir": ToolRule(decision="deny")}}
    )
    d = Driver(
        [reply("", WRITE, call("list_dir", call_id="c2")), reply("", call("finish", answer="ok"))]
    )
    _, state = d.run(spec)
    assert [c.name for c in d.tool_inputs[0].calls] == ["write_file"]
    obs = d.model_inputs[1].request.new_messages
    assert "denied by policy" in str(obs[1].content)
    assert state.steering.records[0].action == "policy_deny"


def test_rule_of_two_asks_even_when_auto_approved() -> None:
    cat = catalog(read_secrets=ToolInfo(read_only=True, sensitive=True))
    spec = SPEC.model_copy(update={"auto_approve": True})
    reasons: list[str] = []

    def human(state: RunState) -> list[object]:
        reasons.append(state.turn.approvals[0].reason)
        return [decide(state, "approve")]

    d = Driver([reply("", WRITE), reply("", call("finish", answer="ok"))], human=human, catalog=cat)
    _, state = d.run(spec)
    assert state.rule_of_two
    assert reasons and reasons[0].startswith("Rule of Two")


def test_rule_of_two_can_be_waived() -> None:
    cat = catalog(read_secrets=ToolInfo(read_only=True, sensitive=True))
    spec = SPEC.model_copy(update={"auto_approve": True, "waive_rule_of_two": True})
    d = Driver([reply("", WRITE), reply("", call("finish", answer="ok"))], catalog=cat)
    _, state = d.run(spec)
    assert not state.rule_of_two and len(d.tool_inputs[0].calls) == 1


def test_untrusted_output_is_marked_for_fencing() -> None:
    d = Driver([reply("", call("read_file", path="a")), reply("", call("finish", answer="ok"))])
    d.run(SPEC)
    (obs,) = d.model_inputs[1].request.new_messages
    assert obs.untrusted


def test_pause_blocks_everything_until_resume_and_messages_wait() -> None:
    state = loop.initial_state(SPEC, "r")
    state = loop.apply(state, Boundary(now=T0))
    state = loop.apply(state, Steered(input=PauseRequest(id="p")))
    state = loop.apply(state, Steered(input=PauseRequest(id="p2")))  # pausing twice: harmless
    state = loop.apply(state, Steered(input=LiveMessage(id="m1", text="first")))
    state = loop.apply(state, Steered(input=LiveMessage(id="m2", text="second")))
    state = loop.apply(state, Steered(input=LiveMessage(id="m1", text="first again")))
    state = loop.apply(state, Boundary(now=T0))
    effect = loop.next_effect(state)
    assert isinstance(effect, AwaitInput) and effect.waiting_for == ("resume",)
    assert state.conversation.pending[-1].origin == "task"  # nothing drained while paused
    state = loop.apply(state, Steered(input=ResumeRequest(id="r")))
    state = loop.apply(state, Steered(input=ResumeRequest(id="r2")))  # resuming twice: harmless
    state = loop.apply(state, ToolsLoaded(catalog=catalog()))
    state = loop.apply(state, ModelDescribed(chain=chain()))
    state = loop.apply(state, Boundary(now=T0))
    request = loop.next_effect(state).request  # type: ignore[union-attr]
    lives = [m for m in request.new_messages if m.origin == "live"]
    assert [m.content for m in lives] == ["first", "second"]


def test_ask_user_waits_for_the_answer() -> None:
    ask = call("ask_user", question="Which file?", options=["a", "b"])
    d = Driver(
        [reply("", ask), reply("", call("finish", answer="ok"))],
        human=scripted(
            lambda s: [Answer(request_id=s.turn.questions[0].request_id, text="b", identity="bo")]
        ),
        catalog=catalog(ask_user=ToolInfo(read_only=True)),
    )
    _, state = d.run(SPEC)
    (obs,) = d.model_inputs[1].request.new_messages
    assert obs.content == "b"
    (record,) = state.steering.records
    assert record.action == "answered" and record.identity == "bo"


def test_grant_steps_extends_the_run() -> None:
    spec = SPEC.model_copy(update={"max_steps": 1, "wait_for_steps_grant": True})
    d = Driver(
        [reply("", call("list_dir")), reply("", call("finish", answer="ok"))],
        human=scripted([StepGrant(id="g", steps=2)]),
    )
    result, _ = d.run(spec)
    assert result.terminal_reason is TerminalReason.COMPLETED and result.steps == 2


def test_grant_of_zero_ends_with_max_steps() -> None:
    spec = SPEC.model_copy(update={"max_steps": 1, "wait_for_steps_grant": True})
    d = Driver([reply("", call("list_dir"))], human=scripted([StepGrant(id="g", steps=0)]))
    result, _ = d.run(spec)
    assert result.terminal_reason is TerminalReason.MAX_STEPS
    assert "no more steps granted" in (result.error or "")


def test_expiry_denies_by_default() -> None:
    d = Driver(
        [reply("", WRITE), reply("", call("finish", answer="ok"))],
        human=scripted([timedelta(hours=25)]),
    )
    _, state = d.run(SPEC)
    (obs,) = d.model_inputs[1].request.new_messages
    assert str(obs.content).startswith("Error (expired)")
    assert state.steering.records[0].action == "expired"


def test_expiry_can_cancel_the_run() -> None:
    spec = SPEC.model_copy(update={"approval_expiry": "cancel", "approval_timeout_seconds": 60})
    d = Driver([reply("", WRITE)], human=scripted([timedelta(minutes=2)]))
    result, _ = d.run(spec)
    assert result.terminal_reason is TerminalReason.CANCELLED
    assert "expired" in (result.error or "")


def test_await_input_carries_the_earliest_expiry() -> None:
    state = started(SPEC)
    state = loop.apply(state, ModelReplied(reply=reply("", WRITE)))
    effect = loop.next_effect(state)
    assert isinstance(effect, AwaitInput)
    assert effect.until == T0 + timedelta(days=1) and effect.waiting_for == ("approval",)
    assert not isinstance(effect, RunTools)
