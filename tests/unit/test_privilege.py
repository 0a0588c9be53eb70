"""A run may narrow what the worker allows, never widen it (`capstan.core.privilege`).

The tables: every path that starts a run by every spec field that could widen it (what a caller
without `admin` is refused, or inherits narrowed); the effective tool decision for every worker
rule by run rule by `auto_approve`. The sandbox limits a worker caps are in
`test_privilege_sandbox.py`; the HTTP routes are driven as a client would in
`tests/integration/test_privilege_routes.py`.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import pytest

from capstan.client.runs import CapstanClient
from capstan.client.schedules import Schedules, When
from capstan.client.threads import Threads
from capstan.core import privilege
from capstan.core.policy import policy_for
from capstan.core.privilege import PolicyDecision, PrivilegeError
from capstan.core.spec import RunResult, RunSpec, SandboxLimits, TerminalReason, ToolRule
from capstan.core.tooling import ToolInfo
from capstan.runtime.config import Settings

ROOT = Path(__file__).resolve().parents[2]
#: a token with every scope but admin (the API's `alice`)
MEMBER = frozenset({"read", "steer", "approve"})
ALLOW = ToolRule(decision="allow")
CHILD = RunSpec(task="", auto_approve=True)

#: spec field -> (a spec that sets it, the parts a caller without admin may not ask for)
FIELDS: dict[str, tuple[RunSpec, list[str]]] = {
    "auto_approve": (RunSpec(task="t", auto_approve=True), ["auto_approve"]),
    "waive_rule_of_two": (RunSpec(task="t", waive_rule_of_two=True), ["waive_rule_of_two"]),
    "tool_policy allow": (
        RunSpec(task="t", tool_policy={"write_file": ALLOW}),
        ["tool_policy.write_file"],
    ),
    "tool_policy ask": (
        RunSpec(task="t", tool_policy={"write_file": ToolRule(decision="ask")}),
        [],
    ),
    "tool_policy deny": (
        RunSpec(task="t", tool_policy={"run_shell": ToolRule(decision="deny")}),
        [],
    ),
    "deny_arguments": (
        RunSpec(task="t", tool_policy={"write_file": ToolRule(deny_arguments={"path": "^x"})}),
        [],
    ),
    "sandbox.network": (
        RunSpec(task="t", sandbox=SandboxLimits(network=True)),
        ["sandbox.network"],
    ),
    # higher limits are not refused: the worker lowers them to its own (clamp_sandbox)
    "sandbox limits": (RunSpec(task="t", sandbox=SandboxLimits(memory_bytes=8 << 30)), []),
    "allowed_tools": (RunSpec(task="t", allowed_tools=("read_file",)), []),
    "delegates": (RunSpec(task="t", delegates={"w": CHILD}), ["delegates.w.auto_approve"]),
    "delegates, deeper": (
        RunSpec(
            task="t",
            delegates={
                "a": RunSpec(
                    task="", delegates={"b": RunSpec(task="", sandbox=SandboxLimits(network=True))}
                )
            },
        ),
        ["delegates.a.delegates.b.sandbox.network"],
    ),
}

#: every path that starts a run, and how it admits the final spec
ROUTES = {
    "POST /api/runs": "asked",
    "POST /api/runs {agent}": "asked",
    "POST /api/threads/{thread}/messages {agent}": "asked",
    "POST /api/threads/{thread}/messages (the thread's next run)": "inherited",
    "capstan run, CapstanClient.start_run": "operator",
    "capstan run --thread, capstan send --thread": "operator",
    "capstan schedule create": "operator",
}


@pytest.mark.parametrize(("route", "field"), list(itertools.product(ROUTES, FIELDS)))
def test_what_a_caller_without_admin_may_start(route: str, field: str) -> None:
    spec, refused = FIELDS[field]
    assert privilege.refused(spec, MEMBER) == refused
    assert privilege.refused(spec, {"admin"}) == []
    mode = ROUTES[route]
    if mode == "operator":
        assert privilege.admit(spec, privilege.OPERATOR) is spec
    elif mode == "inherited":
        got = privilege.admit(spec, MEMBER, inherited=True)
        assert privilege.refused(got, MEMBER) == []
        assert got == spec if not refused else got != spec
        assert privilege.admit(spec, {"admin"}, inherited=True) is spec
    elif refused:
        with pytest.raises(PrivilegeError) as caught:
            privilege.admit(spec, MEMBER)
        assert caught.value.fields == refused
        assert str(caught.value) == f"only an admin token may start a run with {', '.join(refused)}"
    else:
        assert privilege.admit(spec, MEMBER) is spec


def test_narrowing_drops_only_what_the_caller_may_not_have() -> None:
    spec = RunSpec(
        task="t",
        auto_approve=True,
        waive_rule_of_two=True,
        tool_policy={
            "write_file": ToolRule(decision="allow", deny_arguments={"path": "^secrets/"}),
            "run_shell": ToolRule(decision="deny"),
        },
        sandbox=SandboxLimits(network=True, processes=8),
        delegates={"w": CHILD},
        max_steps=7,
    )
    got = privilege.narrowed(spec, MEMBER)
    assert not got.auto_approve and not got.waive_rule_of_two and not got.sandbox.network
    assert got.tool_policy == {
        "write_file": ToolRule(deny_arguments={"path": "^secrets/"}),
        "run_shell": ToolRule(decision="deny"),
    }
    assert not got.delegates["w"].auto_approve
    assert got.sandbox.processes == 8 and got.max_steps == 7  # the rest is the caller's spec
    assert privilege.needs(got) == []


def test_every_api_function_that_starts_a_run_admits_its_spec() -> None:
    """A route added later that starts a run (`runs.start`, `threads.send`) without going
    through `admitted` fails here; only `Tenancy.start` calls Temporal's start."""
    starters = {"start", "send"}
    for path in sorted((ROOT / "capstan" / "api").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            called = {
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
                for node in ast.walk(fn)
                if isinstance(node, ast.Call)
            }
            if "start_workflow" in called or "signal_with_start_workflow" in called:
                assert (path.name, fn.name) == ("tenancy.py", "start"), (path, fn.name)
            elif called & starters and fn.name not in starters:
                starting = {
                    node.func.value.id
                    for node in ast.walk(fn)
                    if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in starters
                    and isinstance(node.func.value, ast.Name)
                }
                if starting & {"runs", "threads"}:
                    assert "admitted" in called, f"{path.name}:{fn.name} starts a run unchecked"


class _Recorder:
    """A Temporal client that records what it would start."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    async def start_workflow(self, _name: str, start: Any, **_: Any) -> None:
        self.started.append(start.spec)

    async def create_schedule(self, _name: str, schedule: Any, **_: Any) -> None:
        self.started.append(schedule.action.args[0].spec)


async def test_the_client_and_cli_start_as_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[frozenset[str]] = []
    admit = privilege.admit

    def spy(spec: RunSpec, scopes: Any, *, inherited: bool = False) -> RunSpec:
        seen.append(frozenset(scopes))
        return admit(spec, scopes, inherited=inherited)

    monkeypatch.setattr(privilege, "admit", spy)
    recorder = _Recorder()
    client = CapstanClient(recorder, Settings())  # type: ignore[arg-type]

    async def polled() -> bool:
        return True

    client.workers_polling = polled  # type: ignore[method-assign]
    spec = FIELDS["auto_approve"][0]
    await client.start_run(spec)
    await Schedules(client).create("nightly", spec, When(cron="0 2 * * *"))
    assert [s.auto_approve for s in recorder.started] == [True, True]
    assert seen == [privilege.OPERATOR, privilege.OPERATOR]


def _thread_after(previous: RunSpec) -> Threads:
    """Threads whose thread's last run ended, having started with `previous`."""
    threads = Threads(CapstanClient(_Recorder(), Settings()))  # type: ignore[arg-type]

    async def last(_run_id: str, _tenant: str = "default") -> str:
        return "execution-1"

    async def result(_run_id: str, _execution: str) -> RunResult:
        return RunResult(run_id="thread-t", terminal_reason=TerminalReason.COMPLETED)

    async def spec_of(_run_id: str, _execution: str | None = None) -> RunSpec:
        return previous

    threads._last_returned = last  # type: ignore[method-assign]
    threads._result = result  # type: ignore[method-assign]
    threads.capstan.started_spec = spec_of  # type: ignore[method-assign]
    return threads


async def test_a_threads_next_run_takes_its_privileges_from_the_sender() -> None:
    previous = RunSpec(
        task="first",
        auto_approve=True,
        waive_rule_of_two=True,
        tool_policy={"write_file": ALLOW},
        sandbox=SandboxLimits(network=True),
        system_prompt="You write.",
    )
    threads = _thread_after(previous)
    member = await threads.next_spec("t", "next", scopes=MEMBER)
    assert (member.auto_approve, member.waive_rule_of_two, member.sandbox.network) == (False,) * 3
    assert member.tool_policy == {"write_file": ToolRule()} and member.system_prompt == "You write."
    assert member.task == "next" and member.thread == "t"
    admin = await threads.next_spec("t", "next", scopes={"admin"})
    assert admin.auto_approve and admin.tool_policy == {"write_file": ALLOW}
    operator = await threads.next_spec("t", "next")  # the CLI
    assert operator.auto_approve
    with pytest.raises(PrivilegeError, match="auto_approve"):
        await threads.next_spec("t", "next", RunSpec(task="x", auto_approve=True), MEMBER)


# -- tool decisions ---------------------------------------------------------------------------

D = PolicyDecision | None
#: (worker rule, run rule, auto_approve, read-only) -> decision
DECISIONS: list[tuple[D, D, bool, bool, PolicyDecision]] = [
    (None, None, False, True, "allow"),
    (None, None, False, False, "ask"),
    (None, None, True, False, "allow"),
    (None, "allow", False, False, "allow"),
    (None, "ask", False, True, "ask"),
    (None, "deny", True, True, "deny"),
    ("deny", None, False, False, "deny"),
    ("deny", "ask", False, False, "deny"),  # a run lifted the worker's deny to ask
    ("deny", "allow", True, True, "deny"),
    ("deny", "ask", True, False, "deny"),
    ("ask", None, True, False, "ask"),  # auto_approve never lifts the worker's ask
    ("ask", "allow", False, False, "ask"),
    ("ask", "allow", True, True, "ask"),
    ("ask", "deny", False, False, "deny"),
    ("allow", None, False, False, "allow"),
    ("allow", "ask", False, False, "ask"),
    ("allow", "ask", True, False, "allow"),  # within the worker's allow
    ("allow", "deny", False, True, "deny"),
]


@pytest.mark.parametrize(("worker", "run", "auto", "read_only", "expected"), DECISIONS)
def test_the_effective_tool_decision(
    worker: D, run: D, auto: bool, read_only: bool, expected: PolicyDecision
) -> None:
    spec = RunSpec(
        task="t",
        auto_approve=auto,
        tool_policy={"write_file": ToolRule(decision=run)} if run else {},
    )
    info = ToolInfo(read_only=read_only, policy=worker)
    decision, reason = policy_for("write_file", info, spec, rule_of_two=False)
    assert decision == expected
    if worker is not None and privilege.STRICTNESS[worker] > privilege.STRICTNESS[run or worker]:
        assert (
            reason.startswith(f"worker policy for write_file: {worker}") and "never widen" in reason
        )


def test_no_run_is_ever_looser_than_its_worker() -> None:
    decisions: list[D] = [None, "allow", "ask", "deny"]
    for worker, run, auto, read_only in itertools.product(
        decisions, decisions, (False, True), (False, True)
    ):
        got, _ = privilege.tool_decision("x", worker, run, read_only=read_only, auto_approve=auto)
        if worker is not None:
            assert privilege.STRICTNESS[got] >= privilege.STRICTNESS[worker], (worker, run, auto)
        if run is not None:
            assert privilege.STRICTNESS[got] >= privilege.STRICTNESS[run] or (auto and run == "ask")


def test_the_rule_of_two_still_asks_on_top() -> None:
    spec = RunSpec(task="t", tool_policy={"write_file": ALLOW})
    info = ToolInfo(policy="allow")
    assert policy_for("write_file", info, spec, rule_of_two=True)[0] == "ask"
    assert policy_for("write_file", ToolInfo(policy="deny"), spec, rule_of_two=True)[0] == "deny"
