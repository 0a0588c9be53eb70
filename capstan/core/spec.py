"""What a run is asked to do (`RunSpec`) and how it ended (`RunResult`, `RunStatus`).

These are the workflow's input and output and the `status` query's answer, so fields are only
ever added, with defaults, to keep old histories decoding. Pure types only.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from capstan.core import output, schemas
from capstan.core.content import BlobRef, Text
from capstan.core.inbox import InboxQueue
from capstan.core.messages import Message, Usage
from capstan.core.patterns import Pattern
from capstan.core.strict import StrictModel
from capstan.core.tenants import workspace_parts

__all__ = [
    "INTERNAL_FIELDS",
    "MAX_OUTPUT_SCHEMA_BYTES",
    "SANDBOX_TOOLS",
    "ActivityTuning",
    "Budgets",
    "ContextPolicy",
    "FinishMode",
    "ForkPoint",
    "GuardPolicy",
    "OutputFormat",
    "Phase",
    "RunResult",
    "RunSpec",
    "RunStatus",
    "SandboxLimits",
    "TerminalReason",
    "ToolRule",
]


class TerminalReason(StrEnum):
    """Every run ends with exactly one of these."""

    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    BUDGET_EXHAUSTED = "budget_exhausted"
    CANCELLED = "cancelled"
    MODEL_ERROR = "model_error"
    PROMPT_TOO_LONG = "prompt_too_long"
    CIRCUIT_BREAKER = "circuit_breaker"
    FAILED = "failed"
    #: the run's `output_schema` refused every answer the model gave (`guards.output_attempts`)
    OUTPUT_INVALID = "output_invalid"


class FinishMode(StrEnum):
    """How a run says it is done.

    `tool`: only a call to the builtin `finish(answer)` completes the run; a text-only reply is
    nudged. `text`: a reply without tool calls completes the run with its text.
    """

    TOOL = "tool"
    TEXT = "text"


Phase = Literal["starting", "thinking", "acting", "finished"]
OutputFormat = Literal["text", "json"]
#: the largest `RunSpec.output_schema` (its JSON): it travels with the run's input
MAX_OUTPUT_SCHEMA_BYTES = 64_000
ExpiryOutcome = Literal["deny", "cancel"]


class ToolRule(StrictModel):
    """Policy for one tool: `allow`, `ask` or `deny`, and argument patterns that are denied.

    Example: ``ToolRule(decision="ask", deny_arguments={"path": r"^secrets/"})``.
    """

    model_config = ConfigDict(frozen=True)

    decision: Literal["allow", "ask", "deny"] | None = None
    #: field -> pattern (RE2: linear time; a pattern RE2 cannot compile is refused here)
    deny_arguments: dict[str, Pattern] = {}


class ActivityTuning(StrictModel):
    """Timeouts and retries for the run's activities (seconds).

    A worker that dies mid-call is noticed after the heartbeat timeout, so it is short: model
    and tool activities heartbeat every 0.5-1 s (Temporal passes them on at most once a second),
    and a run moves on about 2 s + the first retry + the worker's 1 s sticky timeout after its
    worker was killed. Old runs keep the values recorded in their spec.
    """

    model_config = ConfigDict(frozen=True)

    model_start_to_close: float = 300.0
    model_heartbeat: float = 2.0
    model_max_attempts: int = 5
    model_initial_retry: float = 0.5
    model_max_retry: float = 60.0
    #: a model call the provider still refuses (429) after its attempts waits this long on a
    #: durable timer and is called again: a run never fails for provider capacity
    model_capacity_wait: float = Field(default=30.0, gt=0, le=3600)
    tool_default_timeout: float = 120.0
    tool_heartbeat: float = 2.0
    tool_max_attempts: int = 3
    # the first retry of a failed tool call (then doubling); what runs before it got too
    tool_initial_retry: float = Field(default=1.0, gt=0)


class ContextPolicy(StrictModel):
    """When the context window is managed, as fractions of the usable window (window minus the
    reply's reserve), and how much of a tool result the model sees.

    ok < `compact_at` (prune old tool outputs) < `warn_at` (one nudge listing what will go) <
    `emergency_at` (summarise the oldest turns) < `reject_at` (the call is not made:
    `prompt_too_long`).
    """

    model_config = ConfigDict(frozen=True)

    compact_at: float = Field(default=0.70, gt=0, le=1)
    warn_at: float = Field(default=0.80, gt=0, le=1)
    emergency_at: float = Field(default=0.90, gt=0, le=1)
    reject_at: float = Field(default=1.0, gt=0, le=2)
    keep_turns: int = Field(default=4, ge=1)
    tool_result_max_tokens: int = Field(default=30_000, ge=100)
    tool_result_window_share: float = Field(default=0.4, gt=0, le=1)
    tool_result_max_lines: int = Field(default=2_000, ge=1)
    tool_result_max_bytes: int = Field(default=100_000, ge=256)


class GuardPolicy(StrictModel):
    """Circuit breaker thresholds, turn-quality and finish guards (see `capstan.core.guards`)."""

    model_config = ConfigDict(frozen=True)

    identical_call_nudge: int = 3
    identical_call_abort: int = 5
    truncated_abort: int = 3
    argument_errors_abort: int = 3
    fruitless_chars: int = 48
    fruitless_nudge: int = 5
    fruitless_abort: int = 8
    similar_window: int = 128
    similar_nudge: int = 8
    similar_abort: int = 12
    #: refuse the first `finish` with this reason (the model sees it); the second is accepted
    finish_refusal: str | None = None
    #: refuse the first `finish` unless these tools were called successfully
    finish_requires: tuple[str, ...] = ()
    #: one wrap-up nudge when this many steps, or this share of any budget, remain
    finalize_steps: int = 2
    finalize_fraction: float = 0.1
    #: answers refused by the run's `output_schema` before the run ends `output_invalid`
    output_attempts: int = Field(default=3, ge=1)


class Budgets(StrictModel):
    """Per-run limits. `None` means unlimited. On exhaustion the run ends `budget_exhausted`
    naming the budget, or, with `wait_for_grant`, waits for a `grant_budget` signal."""

    model_config = ConfigDict(frozen=True)

    max_tool_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_seconds: float | None = None
    wait_for_grant: bool = False


#: The tools that run code in the jail: their calls carry the run's `SandboxLimits`.
SANDBOX_TOOLS = ("run_shell", "run_python")


class SandboxLimits(StrictModel):
    """Limits of one `run_shell` / `run_python` call, enforced by the kernel inside the jail.

    A call that reaches one is stopped and its observation names the limit. `processes` is
    counted per call (the jail has its own user namespace); `memory_bytes` is address space,
    so runtimes that reserve much more than they use (Go, the JVM) need more. `retryable`
    false: a call interrupted by a lost worker is reported instead of run again.
    """

    model_config = ConfigDict(frozen=True)

    wall_seconds: float = Field(default=60.0, gt=0)
    cpu_seconds: int = Field(default=60, ge=1)
    memory_bytes: int = Field(default=1 << 30, ge=32 << 20)
    processes: int = Field(default=64, ge=4)
    file_bytes: int = Field(default=100 << 20, ge=1)
    output_bytes: int = Field(default=1 << 20, ge=1024)
    tmp_bytes: int = Field(default=64 << 20, ge=1 << 20)
    network: bool = False
    retryable: bool = True


#: what `RunStatus.waiting_for` says of a model call waiting for its provider to take calls again
#: (a 429: Temporal retries it, or the run waits out the retries; `capstan limits`)
CAPACITY = "provider capacity"


class ForkPoint(BaseModel):
    """Where a forked run branched off: the run it forked and the step whose recorded
    conversation it goes on from (`capstan fork`). Recorded in the fork's history."""

    model_config = ConfigDict(frozen=True)

    run_id: str = Field(min_length=1, max_length=256)
    step: int = Field(ge=0)


class RunSpec(StrictModel):
    """The input of one agent run.

    Example::

        RunSpec(task="Summarise notes.txt", model="default", max_steps=10)

    `model` names a model profile resolved by the worker from its environment; no secret is ever
    part of a RunSpec.
    """

    model_config = ConfigDict(frozen=True)

    task: str
    system_prompt: str | None = None
    model: str = "default"
    allowed_tools: tuple[str, ...] | None = None
    max_steps: int = Field(default=25, ge=1)
    finish_mode: FinishMode = FinishMode.TOOL
    run_id: str | None = None
    max_nudges: int = Field(default=2, ge=0)
    tool_concurrency: int = Field(default=4, ge=1)
    observation_max_chars: int = Field(default=16_000, ge=256)
    continue_as_new_every: int = Field(default=50, ge=1)
    tuning: ActivityTuning = ActivityTuning()
    tool_policy: dict[str, ToolRule] = {}
    auto_approve: bool = False
    waive_rule_of_two: bool = False
    approval_timeout_seconds: float = Field(default=86_400.0, gt=0)
    approval_expiry: ExpiryOutcome = "deny"
    wait_for_steps_grant: bool = False
    context: ContextPolicy = ContextPolicy()
    guards: GuardPolicy = GuardPolicy()
    budgets: Budgets = Budgets()
    sandbox: SandboxLimits = SandboxLimits()
    #: the agent definition this spec was resolved from (`CAPSTAN_AGENTS`), for the record
    agent: str | None = None
    #: the thread this run belongs to (`capstan run|send --thread`): its runs share the workflow
    #: id `thread-<thread>`, and its task arrives as the start signal (signal-with-start)
    thread: str | None = None
    #: the conversation head of the thread's previous run, which this run goes on from
    continues: BlobRef | None = None
    #: messages that run left after `continues` (not yet in its chain), sent before the task
    continues_tail: tuple[Message, ...] = ()
    #: that conversation's size in tokens, so the window is managed from the first model call
    continues_tokens: int = Field(default=0, ge=0)
    #: the live messages that run accepted and never read (`RunResult.unread`), read first
    continues_unread: InboxQueue | None = None
    #: this run is a fork: it goes on from `continues` / `continues_tail`, the conversation of
    #: another run as that run's model saw it after this step (no task of its own is sent)
    forked_from: ForkPoint | None = None
    #: the agents this run may delegate to (`delegate(agent, task)`), by name; each is a
    #: definition (its `task` unused), embedded whole so the tree's definitions are in history
    delegates: dict[str, RunSpec] = {}
    #: how deep in a delegation tree this run is (0: started by a client), and the deepest a
    #: child may be: a run at `max_depth - 1` starts children that cannot delegate further
    depth: int = Field(default=0, ge=0)
    max_depth: int = Field(default=2, ge=0, le=8)
    #: the run's own workspace below the worker's root (`capstan.core.tenants.workspace_key`:
    #: `<tenant>`, `<tenant>/threads/<thread>`), set by Capstan only; None: the root itself
    workspace: str | None = None
    #: the answer's JSON Schema (draft 2020-12): `finish` takes an answer of this shape, checked
    #: by the worker; the run completes with it as JSON (`RunResult.output_format`), or ends
    #: `output_invalid` after `guards.output_attempts` refused answers. None: a text answer.
    output_schema: dict[str, Any] | None = None
    #: Temporal's Priority & Fairness, carried to every activity and child of the run: 1 is
    #: dispatched first, 5 last (None: the server's default, 3)
    priority: int | None = Field(None, ge=1, le=5)
    #: runs sharing a key share the workers in proportion to `fairness_weight` when work
    #: waits (None: one pool); the API sets it to the caller's tenant
    fairness_key: str | None = Field(None, min_length=1, max_length=64)
    fairness_weight: float | None = Field(None, ge=0.001, le=1000)

    @field_validator("fairness_key")
    @classmethod
    def _short_fairness_key(cls, key: str | None) -> str | None:
        """Temporal keeps at most 64 bytes of a fairness key."""
        if key is not None and len(key.encode()) > 64:
            raise ValueError("a fairness key is at most 64 bytes of UTF-8")
        return key

    @field_validator("output_schema")
    @classmethod
    def _usable_output_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        """A schema `finish` can be checked against: draft 2020-12, self-contained, bounded
        (`capstan.core.schemas`), and small enough to travel with the run."""
        if schema is None:
            return None
        size = len(json.dumps(schema, separators=(",", ":"), default=str))
        if size > MAX_OUTPUT_SCHEMA_BYTES:
            raise ValueError(f"it is {size:,} bytes of JSON (at most {MAX_OUTPUT_SCHEMA_BYTES:,})")
        problem = schemas.schema_problem(schema)
        if problem is not None:
            raise ValueError(problem)
        problem = output.schema_problem(schema)
        if problem is not None:
            raise ValueError(problem)
        return schema

    @model_validator(mode="after")
    def _typed_through_finish(self) -> RunSpec:
        """A typed answer is given through `finish` (whose parameters carry the schema), so a
        typed run is in `tool` finish mode: a text reply would end it unchecked."""
        if self.output_schema is not None and self.finish_mode is FinishMode.TEXT:
            raise ValueError(
                "output_schema needs finish_mode 'tool' (the answer is given through `finish`)"
            )
        return self

    @field_validator("workspace")
    @classmethod
    def _plain_workspace_key(cls, key: str | None) -> str | None:
        """A key of plain names only (no `..`, no absolute path): refused here, for every
        caller, rather than on each tool call of the run."""
        if key is not None:
            workspace_parts(key)
        return key


#: Fields of `RunSpec` that Capstan itself sets (threads, delegation, tenancy): never part of a
#: public request (the HTTP API's request schema leaves them out; a client that sends one is
#: refused). Add a field here when it is written by Capstan rather than by a caller.
INTERNAL_FIELDS: frozenset[str] = frozenset(
    {
        "continues",
        "continues_tail",
        "continues_tokens",
        "continues_unread",
        "delegates",
        "depth",
        "forked_from",
        "workspace",
    }
)


#: how many of a run's latest diagnostics its status (and its result) carry
STATUS_DIAGNOSTICS = 10


class RunStatus(BaseModel):
    """The answer of the `status` query."""

    run_id: str
    phase: Phase
    step: int
    terminal_reason: TerminalReason | None = None
    output: Text | None = None
    output_format: OutputFormat = "text"
    error: str | None = None
    usage: Usage = Usage()
    continued: int = 0
    paused: bool = False
    waiting_for: list[str] = []
    diagnostics: list[str] = []
    #: live messages the run accepted that the model has not read yet (`capstan.core.inbox`)
    messages_waiting: int = 0
    #: where the answer came from: the run's worker (a query), its result (a closed run), or
    #: its history when no worker answered (then `as_of_event` is the last event read)
    source: Literal["worker", "result", "history"] = "worker"
    as_of_event: int | None = None


class RunResult(BaseModel):
    """How a run ended. Returned by the workflow for every terminal reason (never raised)."""

    run_id: str
    terminal_reason: TerminalReason
    output: Text | None = None
    error: str | None = None
    steps: int = 0
    usage: Usage = Usage()
    #: where the conversation stood at the end (what a thread's next run continues from): the
    #: head of its chain, the messages not yet in it, and its size in tokens
    conversation: BlobRef | None = None
    tail: tuple[Message, ...] = ()
    context_tokens: int = 0
    #: the run's last diagnostics (as `RunStatus.diagnostics`), so a closed run's status is
    #: answered from its result with no worker asked
    diagnostics: tuple[str, ...] = ()
    #: `json`: `output` is JSON that matched the run's `output_schema` (a typed result)
    output_format: OutputFormat = "text"
    #: live messages the run accepted and never gave to the model, kept in the blob store
    #: (`capstan.core.inbox`; newer than those in `tail`): a thread's next run reads them
    unread: InboxQueue | None = None
    #: how many times the run continued as new; None in results written before the field, whose
    #: count only their history knows
    continued: int | None = None

    def status(self, continued: int) -> RunStatus:
        """The status of the run this result ended (`continued`: its continue-as-new count)."""
        return RunStatus(
            run_id=self.run_id,
            phase="finished",
            step=self.steps,
            terminal_reason=self.terminal_reason,
            output=self.output,
            output_format=self.output_format,
            error=self.error,
            usage=self.usage,
            continued=continued,
            diagnostics=list(self.diagnostics),
            source="result",
        )
