"""Least privilege: a run may narrow what the worker allows, never widen it.

Three rules, one module, used on every path that starts or runs a run:

1. **Scopes** (`needs`, `admit`). The parts of a spec that let work run with no person watching
   or reach further than the jail's default need the caller's `admin` scope: `auto_approve`,
   `waive_rule_of_two`, a tool rule `allow`, `sandbox.network`, a `priority` above the default
   and a `fairness_weight` above 1 (a larger share of the fleet); in the spec and, recursively, in
   every delegate definition it embeds. `admit` is the one check every start path calls on the
   *final* spec (after an agent definition is resolved): a spec the caller asked for that needs
   a scope it lacks is refused (`PrivilegeError`, a 403 over HTTP); a spec the caller inherits
   (a thread's next run takes the previous run's spec) is narrowed to what the caller holds, so
   a run takes its privileges from the caller who started it. The CLI, the Python client and
   schedules talk to Temporal directly: their caller is the operator (`OPERATOR`).
2. **Tool decisions** (`tool_decision`). The worker's rule for a tool (its policy file,
   `CAPSTAN_POLICY`, or its MCP server's rule) is a ceiling: the decision is the stricter of the
   worker's and the run's (deny > ask > allow), and `auto_approve` lifts only an `ask` that is
   not the worker's. Without a worker rule the run's rule replaces the default (read-only tools
   allow, others ask); that is where the `admin` scope of rule 1 matters.
3. **Sandbox limits** (`clamp_sandbox`). The worker's limits are ceilings: each limit a run asks
   for is lowered to the worker's, and the jail has a network only when the run asks for one and
   the worker allows it. Applied on the worker, where a call's jail is built.

Pure: no IO, no settings, no clock. Must never widen: every function returns something at most
as permissive as the least permissive of its inputs allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

from capstan.core.spec import RunSpec, SandboxLimits, ToolRule
from capstan.core.strict import revised

__all__ = [
    "ADMIN",
    "DEFAULT_PRIORITY",
    "OPERATOR",
    "STRICTNESS",
    "PolicyDecision",
    "PrivilegeError",
    "admit",
    "clamp_sandbox",
    "fair_share",
    "narrowed",
    "needs",
    "refused",
    "tool_decision",
]

PolicyDecision = Literal["allow", "ask", "deny"]

#: The scope that may start runs that weaken the gate or open the jail's network.
ADMIN = "admin"
#: The scopes of a caller with direct access to Temporal (the CLI, the Python client,
#: schedules): it could start any workflow anyway.
OPERATOR: frozenset[str] = frozenset({ADMIN})

#: How strict each decision is: the stricter of two wins.
STRICTNESS: Mapping[PolicyDecision, int] = MappingProxyType({"allow": 0, "ask": 1, "deny": 2})

#: Temporal's default priority key: a run may ask for a lower priority (4, 5), never a higher.
DEFAULT_PRIORITY = 3

#: Spec flags that let tools run with no person watching.
_UNATTENDED = ("auto_approve", "waive_rule_of_two")
#: The numeric `SandboxLimits` a worker caps (`network` is decided apart; `retryable` narrows).
_LIMITS = (
    "wall_seconds",
    "cpu_seconds",
    "memory_bytes",
    "processes",
    "file_bytes",
    "output_bytes",
    "tmp_bytes",
)


class PrivilegeError(Exception):
    """A caller asked for a spec that needs a scope it does not hold; `fields` names the parts."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        super().__init__(f"only an admin token may start a run with {', '.join(fields)}")


def needs(spec: RunSpec, prefix: str = "") -> list[tuple[str, str]]:
    """Each part of `spec` (a dotted field path) that needs a scope, with that scope; the
    definitions of its delegates included, recursively (a child runs what they allow)."""
    found = [(prefix + name, ADMIN) for name in _UNATTENDED if getattr(spec, name)]
    found += [
        (f"{prefix}tool_policy.{tool}", ADMIN)
        for tool, rule in sorted(spec.tool_policy.items())
        if rule.decision == "allow"
    ]
    if spec.sandbox.network:
        found.append((f"{prefix}sandbox.network", ADMIN))
    # ahead of everyone else's runs: a larger share of the fleet than the default
    if spec.priority is not None and spec.priority < DEFAULT_PRIORITY:
        found.append((f"{prefix}priority", ADMIN))
    if spec.fairness_weight is not None and spec.fairness_weight > 1.0:
        found.append((f"{prefix}fairness_weight", ADMIN))
    for name, child in sorted(spec.delegates.items()):
        found += needs(child, f"{prefix}delegates.{name}.")
    return found


def refused(spec: RunSpec, scopes: Iterable[str]) -> list[str]:
    """The parts of `spec` that need a scope `scopes` lacks (`admin` holds every scope)."""
    held = set(scopes)
    if ADMIN in held:
        return []
    return [field for field, scope in needs(spec) if scope not in held]


def narrowed(spec: RunSpec, scopes: Iterable[str]) -> RunSpec:
    """`spec` without the parts that need a scope `scopes` lacks: flags off, `allow` rules
    dropped (the worker's rule or the default applies), no network; delegates alike."""
    held = frozenset(scopes)
    if not refused(spec, held):
        return spec
    rules = {
        tool: ToolRule(decision=None, deny_arguments=rule.deny_arguments)
        if rule.decision == "allow"
        else rule
        for tool, rule in spec.tool_policy.items()
    }
    return revised(
        spec,
        **dict.fromkeys(_UNATTENDED, False),
        tool_policy=rules,
        sandbox=revised(spec.sandbox, network=False),
        priority=None if spec.priority is None else max(spec.priority, DEFAULT_PRIORITY),
        fairness_weight=None if spec.fairness_weight is None else min(spec.fairness_weight, 1.0),
        delegates={name: narrowed(child, held) for name, child in spec.delegates.items()},
    )


def admit(spec: RunSpec, scopes: Iterable[str], *, inherited: bool = False) -> RunSpec:
    """The spec a caller holding `scopes` may start: the final spec, as the caller asked for it
    (`PrivilegeError` when it needs a scope the caller lacks), or, `inherited` from an earlier
    run (a thread's previous run), narrowed to the caller's scopes."""
    held = frozenset(scopes)
    if inherited:
        return narrowed(spec, held)
    missing = refused(spec, held)
    if missing:
        raise PrivilegeError(missing)
    return spec


def fair_share(spec: RunSpec, tenant: str, scopes: Iterable[str]) -> RunSpec:
    """`spec` with its tenant as its fairness key (runs started through the API): the tenants
    share the fleet's workers in turn, whatever each one queues. Only an `admin` may name
    another key (an admin's own batch lane, say)."""
    if spec.fairness_key is not None and ADMIN in frozenset(scopes):
        return spec
    return revised(spec, fairness_key=tenant)


def tool_decision(
    name: str,
    worker: PolicyDecision | None,
    run: PolicyDecision | None,
    *,
    read_only: bool,
    auto_approve: bool,
) -> tuple[PolicyDecision, str]:
    """The decision for `name` under the worker's rule (a ceiling, None: none) and the run's
    rule, and the reason a reviewer is shown. The Rule of Two is applied after this."""
    if worker is None:
        asked: PolicyDecision = run or ("allow" if read_only else "ask")
        reason = f"run policy for {name}: {run}" if run else _default_reason(name, read_only)
        if asked == "ask" and auto_approve:
            return "allow", "auto-approved for this run"
        return asked, reason
    wanted: PolicyDecision = run or worker
    lifted: PolicyDecision = "allow" if wanted == "ask" and auto_approve else wanted
    if STRICTNESS[lifted] < STRICTNESS[worker]:  # the ceiling caps what the run asked
        return worker, (
            f"worker policy for {name}: {worker} (a run may narrow the worker's policy, "
            "never widen it)"
        )
    if lifted != wanted:
        return "allow", "auto-approved for this run"
    if run is not None and run != worker:
        return run, f"run policy for {name}: {run}"
    return worker, f"worker policy for {name}: {worker}"


def _default_reason(name: str, read_only: bool) -> str:
    return "read-only tool" if read_only else f"{name} changes state"


def clamp_sandbox(asked: SandboxLimits, ceiling: SandboxLimits) -> SandboxLimits:
    """`asked` with each limit at most the worker's `ceiling`, and a network only when both
    have one. What a run asks below the ceiling (and `retryable`) is kept."""
    lowered: dict[str, object] = {
        field: min(getattr(asked, field), getattr(ceiling, field)) for field in _LIMITS
    }
    lowered["network"] = asked.network and ceiling.network
    return revised(asked, **lowered)
