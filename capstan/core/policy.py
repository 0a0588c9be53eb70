"""Tool policy: who may run what, decided in the pure core from declared risk and configuration.

A run may narrow what the worker allows, never widen it (`capstan.core.privilege`): the
worker's rule for a tool (its policy file or MCP server rule, carried in the tool catalog) is a
ceiling, and the decision is the stricter of it and the run's rule (`RunSpec.tool_policy`;
deny > ask > allow). Without a worker rule the run's rule, else the default (read-only: allow;
anything that changes state: ask) decides. `auto_approve` turns an ask into allow, except the
worker's own ask. The Rule of Two then forces `ask` on state-changing tools when a run combines
untrusted input, sensitive data and state change, unless the run waives it. Unknown tools are
denied before policy is consulted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Literal

from capstan.core import patterns, privilege, schemas
from capstan.core.content import BlobRef, Text
from capstan.core.spec import RunSpec
from capstan.core.tooling import ToolCatalog, ToolInfo

__all__ = [
    "arguments_hash",
    "canonical_arguments",
    "check_arguments",
    "denied_by",
    "deny_patterns",
    "policy_for",
    "rule_of_two_applies",
]

PolicyDecision = Literal["allow", "ask", "deny"]


def canonical_arguments(arguments: Text) -> str:
    """A stable text for hashing: sorted-key compact JSON, or the ref / raw text if not JSON."""
    if isinstance(arguments, BlobRef):
        return f"ref:{arguments.sha256}"
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        return arguments


def arguments_hash(tool: str, arguments: Text) -> str:
    """sha256 of tool name and canonical arguments: what a decision binds to."""
    return hashlib.sha256(f"{tool}\n{canonical_arguments(arguments)}".encode()).hexdigest()


def rule_of_two_applies(catalog: ToolCatalog, spec: RunSpec) -> bool:
    """True when the run's tools combine untrusted input, sensitive data and state change."""
    if spec.waive_rule_of_two:
        return False
    infos = list(catalog.tools.values())
    return (
        any(i.untrusted_output for i in infos)
        and any(i.sensitive for i in infos)
        and any(not i.read_only for i in infos)
    )


def policy_for(
    name: str, info: ToolInfo, spec: RunSpec, rule_of_two: bool, legacy: bool = False
) -> tuple[PolicyDecision, str]:
    """The decision for a call of `name` and the reason a reviewer is shown. `legacy`: the
    precedence of executions recorded before `Patch.LEAST_PRIVILEGE` (replay only)."""
    rule = spec.tool_policy.get(name)
    worker = _worker_decision(info.policy)
    decide = _legacy_decision if legacy else privilege.tool_decision
    decision, reason = decide(
        name,
        worker,
        rule.decision if rule is not None else None,
        read_only=info.read_only,
        auto_approve=spec.auto_approve,
    )
    if rule_of_two and not info.read_only and decision == "allow":
        decision = "ask"
        reason = (
            "Rule of Two: this run combines untrusted input, sensitive data and state change, "
            "so state-changing calls need approval"
        )
    return decision, reason


def _legacy_decision(
    name: str,
    worker: PolicyDecision | None,
    run: PolicyDecision | None,
    *,
    read_only: bool,
    auto_approve: bool,
) -> tuple[PolicyDecision, str]:
    """Before `Patch.LEAST_PRIVILEGE`: the run's rule, else the worker's, else the default;
    auto-approve turned any ask into allow. Kept so recorded executions replay as they ran."""
    decision: PolicyDecision
    if run is not None:
        decision, reason = run, f"run policy for {name}: {run}"
    elif worker is not None:
        decision, reason = worker, f"worker policy for {name}: {worker}"
    elif read_only:
        decision, reason = "allow", "read-only tool"
    else:
        decision, reason = "ask", f"{name} changes state"
    if decision == "ask" and auto_approve:
        decision, reason = "allow", "auto-approved for this run"
    return decision, reason


def _worker_decision(policy: str | None) -> PolicyDecision | None:
    """The worker's decision for a tool; anything else it carries (none) fails closed."""
    if policy is None or policy in ("allow", "ask", "deny"):
        return policy  # type: ignore[return-value]
    return "deny"


def check_arguments(
    name: str, info: ToolInfo, spec: RunSpec, arguments: Text, legacy: bool = False
) -> str | None:
    """Why these arguments may not run (schema or a denied pattern), or None. `legacy`: a run's
    pattern for a field replaces the worker's, as before `Patch.LEAST_PRIVILEGE` (replay)."""
    if isinstance(arguments, BlobRef):
        return None  # too large to read here: `run_tool` checks them (`denied_by`)
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON: {exc.msg}"
    except RecursionError:
        return "arguments are not valid JSON: nested too deeply"
    if info.parameters:
        checked = schemas.check(info.parameters, value)
        if checked.refused is not None:
            return f"{name} cannot be called: {checked.refused}"
        if checked.errors:
            return f"arguments do not match the schema of {name}: {'; '.join(checked.errors)}"
    return _denied(name, deny_patterns(name, info, spec, legacy), value)


def deny_patterns(
    name: str, info: ToolInfo, spec: RunSpec, legacy: bool = False
) -> tuple[tuple[str, str], ...]:
    """Every `(field, pattern)` that denies a call of `name`: the worker's and the run's all
    apply (a run adds patterns, it never replaces the worker's; `legacy`: it did before
    `Patch.LEAST_PRIVILEGE`)."""
    rule = spec.tool_policy.get(name)
    own = sorted(rule.deny_arguments.items()) if rule is not None else []
    workers = sorted(info.deny_arguments.items())
    if legacy:
        workers = [(f, p) for f, p in workers if f not in dict(own)]
    return (*workers, *own)


def denied_by(name: str, denying: Iterable[tuple[str, str]], arguments: str) -> str | None:
    """Why `arguments` (JSON text) match one of `denying`, or None: the check `run_tool` makes
    on arguments too large to travel inline, which the gate could not read."""
    try:
        value = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        return None  # the tool refuses arguments that are not JSON itself
    return _denied(name, denying, value)


def _denied(name: str, denying: Iterable[tuple[str, str]], value: object) -> str | None:
    """The first deny pattern `value` matches. A pattern RE2 cannot compile (one recorded
    before patterns were checked where they enter) denies: the policy fails closed."""
    for field, pattern in denying:
        field_value = value.get(field) if isinstance(value, dict) else None
        if not isinstance(field_value, str):
            continue
        problem = patterns.pattern_problem(pattern)
        if problem is not None:
            return f"policy denies {name}: its pattern for {field} cannot be checked ({problem})"
        if patterns.search(pattern, field_value):
            return f"policy denies {name} with {field} matching {pattern!r}"
    return None
