"""Delegation in the pure loop: the child's spec and carved budgets, the child's end as an
observation, and what the child spent charged to the parent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from capstan.core import delegation
from capstan.core.children import ChildEnded, Delegation
from capstan.core.effects import LoadTools, Outcome, RunTools, ToolsFinished
from capstan.core.messages import Usage
from capstan.core.spec import Budgets, RunResult, RunSpec, TerminalReason
from capstan.core.state import RunState
from capstan.core.tooling import ToolInfo, ToolSucceeded
from tests.unit.scripted import TOOLS, Driver, call, catalog, reply

DELEGATING = catalog((*TOOLS, "delegate"), delegate=ToolInfo(read_only=True))


def definition(**fields: object) -> RunSpec:
    return RunSpec(task="", **fields)  # type: ignore[arg-type]


def parent(**fields: object) -> RunSpec:
    fields.setdefault("delegates", {"researcher": definition(max_steps=40), "writer": definition()})
    return RunSpec(task="lead", **fields)  # type: ignore[arg-type]


def ended(work: Delegation, reason: TerminalReason, usage: Usage, **fields: object) -> RunResult:
    return RunResult(
        run_id=work.workflow_id, terminal_reason=reason, steps=2, usage=usage, **fields
    )  # type: ignore[arg-type]


@dataclass
class TreeDriver(Driver):
    """The scripted driver, with children: `child` says how each delegation ends."""

    child: Callable[[Delegation], RunResult] = lambda work: ended(
        work, TerminalReason.COMPLETED, Usage(), output=f"{work.agent} done"
    )
    delegations: list[Delegation] = field(default_factory=list)

    def _perform(self, effect: object, state: RunState) -> Outcome:
        if isinstance(effect, RunTools) and effect.children:
            self.delegations += effect.children
            self.tool_inputs.append(effect)
            results = tuple(ToolSucceeded(call_id=c.call_id, output="ok") for c in effect.calls)
            children = tuple(ChildEnded.of(d, self.child(d)) for d in effect.children)
            return ToolsFinished(results=results, children=children)
        return super()._perform(effect, state)


def two_delegations() -> list:
    return [
        reply(
            "",
            call("delegate", "d1", agent="researcher", task="find the facts"),
            call("delegate", "d2", agent="writer", task="draft the text"),
            call("list_dir", "t1", path="."),
            step=0,
        ),
        reply("", call("finish", answer="all done"), step=1),
    ]


def test_delegate_is_offered_only_to_a_run_that_may_delegate() -> None:
    assert delegation.offered(RunSpec(task="t")) == ()
    assert delegation.offered(parent()) == ("researcher", "writer")
    assert delegation.offered(parent(depth=2, max_depth=2)) == ()
    driver = TreeDriver([reply("", call("finish", answer="x"))])
    driver.run(parent())
    (listing,) = [e for e in driver.effects if isinstance(e, LoadTools)]
    assert listing.request.delegates == ("researcher", "writer")


def test_children_get_paths_depth_steps_and_carved_budgets() -> None:
    budgets = Budgets(max_tool_calls=10, max_output_tokens=10_000, max_cost_usd=1.0)
    spec = parent(budgets=budgets, max_steps=30, max_depth=1)
    driver = TreeDriver(two_delegations(), catalog=DELEGATING)
    result, _ = driver.run(spec)
    assert result.terminal_reason is TerminalReason.COMPLETED
    first, second = driver.delegations
    assert (first.workflow_id, second.workflow_id) == ("run-1/researcher-1.0", "run-1/writer-1.1")
    assert first.spec.run_id == first.workflow_id and first.spec.task == "find the facts"
    assert (first.spec.depth, first.spec.agent, first.spec.delegates) == (1, "researcher", {})
    assert first.spec.max_steps == 30  # its own 40, limited by the parent's
    carved = first.spec.budgets
    # 10 calls, less this turn's three and one kept for the parent, split in two
    assert carved.max_tool_calls == 3
    # 10,000 output tokens, less the 5 spent and the parent's next reply (1,000), split in two
    assert carved.max_output_tokens == 4_497
    assert carved.max_cost_usd is not None and carved.max_cost_usd <= 0.5
    assert carved.max_input_tokens is None  # the parent has no such budget
    assert not carved.wait_for_grant
    # the turn's ordinary call ran beside the children
    (work,) = driver.tool_inputs
    assert [c.name for c in work.calls] == ["list_dir"]


def test_a_childs_own_budget_narrows_the_carve() -> None:
    own = definition(budgets=Budgets(max_tool_calls=2, max_wall_seconds=5.0, wait_for_grant=True))
    spec = parent(delegates={"researcher": own}, budgets=Budgets(max_tool_calls=50))
    script = [
        reply("", call("delegate", "d1", agent="researcher", task="go"), step=0),
        reply("", call("finish", answer="ok"), step=1),
    ]
    driver = TreeDriver(script, catalog=DELEGATING)
    driver.run(spec)
    carved = driver.delegations[0].spec.budgets
    assert (carved.max_tool_calls, carved.max_wall_seconds) == (2, 5.0)
    assert not carved.wait_for_grant


def test_children_never_get_more_than_the_parent_has_left() -> None:
    for cap in range(0, 12):
        spec = parent(budgets=Budgets(max_tool_calls=cap))
        driver = TreeDriver(two_delegations(), catalog=DELEGATING)
        driver.run(spec)
        total = sum(d.spec.budgets.max_tool_calls or 0 for d in driver.delegations)
        assert total + 3 < max(cap, 1) or total == 0, (cap, total)


def test_what_a_child_spent_is_charged_to_the_parent() -> None:
    spent = Usage(input_tokens=300, output_tokens=40, model_calls=3, tool_calls=2, cost_usd=0.25)
    driver = TreeDriver(
        two_delegations(),
        catalog=DELEGATING,
        child=lambda work: ended(work, TerminalReason.COMPLETED, spent, output="fine"),
    )
    result, state = driver.run(parent())
    # two model calls of the parent (10 in / 5 out each), two children, three tool calls
    assert result.usage.model_calls == 2 + 2 * 3
    assert result.usage.input_tokens == 20 + 2 * 300
    assert result.usage.output_tokens == 10 + 2 * 40
    assert result.usage.tool_calls == 1 + 2 + 2 * 2
    assert result.usage.cost_usd == 0.5
    assert [c.workflow_id for c in state.children] == ["run-1/researcher-1.0", "run-1/writer-1.1"]


def test_a_child_that_fails_is_an_observation_and_the_parent_goes_on() -> None:
    def child(work: Delegation) -> RunResult:
        if work.agent == "writer":
            return ended(
                work, TerminalReason.BUDGET_EXHAUSTED, Usage(), error="budget tool_calls exhausted"
            )
        return ended(work, TerminalReason.COMPLETED, Usage(), output="the facts")

    driver = TreeDriver(two_delegations(), catalog=DELEGATING, child=child)
    result, _ = driver.run(parent())
    assert result.terminal_reason is TerminalReason.COMPLETED
    tools = {m.tool_call_id: m for m in driver.model_inputs[1].request.new_messages}
    assert tools["d1"].content == "the facts"
    failed = str(tools["d2"].content)
    assert failed.startswith("Error (error): the writer agent (run-1/writer-1.1) ended budget_ex")
    assert "budget tool_calls exhausted" in failed


def test_a_child_that_could_not_start_is_an_observation() -> None:
    outcome = delegation.observation(
        ChildEnded(call_id="d1", agent="writer", workflow_id="p/writer-1.0", step=1, error="gone")
    )
    assert outcome.kind == "failed" and "did not run: gone" in outcome.error


def test_bad_delegate_calls_are_refused_without_a_child() -> None:
    script = [
        reply(
            "",
            call("delegate", "d1", agent="nobody", task="x"),
            call("delegate", "d2", agent="writer", task=""),
            step=0,
        ),
        reply("", call("finish", answer="ok"), step=1),
    ]
    driver = TreeDriver(script, catalog=DELEGATING)
    result, _ = driver.run(parent())
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert driver.delegations == []
    tools = {m.tool_call_id: str(m.content) for m in driver.model_inputs[1].request.new_messages}
    assert "no agent 'nobody'; the agents are: researcher, writer" in tools["d1"]
    assert "non-empty 'task'" in tools["d2"]


def test_delegate_is_an_unknown_tool_to_a_run_that_may_not_delegate() -> None:
    script = [
        reply("", call("delegate", "d1", agent="writer", task="x"), step=0),
        reply("", call("finish", answer="ok"), step=1),
    ]
    driver = TreeDriver(script)  # the catalog has no `delegate`
    driver.run(RunSpec(task="alone"))
    assert driver.delegations == []
    (message,) = driver.model_inputs[1].request.new_messages
    assert str(message.content).startswith("Error (unknown_tool)")


def test_grandchildren_stop_at_the_depth_limit() -> None:
    grand = definition()
    middle = definition(delegates={"leaf": grand})
    spec = parent(delegates={"researcher": middle}, max_depth=2)
    script = [
        reply("", call("delegate", "d1", agent="researcher", task="go"), step=0),
        reply("", call("finish", answer="ok"), step=1),
    ]
    driver = TreeDriver(script, catalog=DELEGATING)
    driver.run(spec)
    child = driver.delegations[0].spec
    assert list(child.delegates) == ["leaf"] and delegation.offered(child) == ("leaf",)
    assert delegation.offered(child.delegates["leaf"].model_copy(update={"depth": 2})) == ()
