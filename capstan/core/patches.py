"""Every `workflow.patched` id the agent workflow has ever recorded, live and retired: one place.

A patch id is written into the history of every run that takes the gated branch, so an id can
never be renamed or reused, and a retired one must stay known for as long as histories that
carry its marker may replay. The README's "Changing workflow code safely" lists these ids; a
test (`tests/unit/test_patches.py`) keeps that list and this enum the same.

Never: import Temporal here (the workflow asks `workflow.patched(patch.value)` through
`capstan.workflows.patching`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RETIRED", "Patch"]


class Patch(StrEnum):
    """A patch id. Live ones gate a branch (`patched`); retired ones are
    `workflow.deprecate_patch` calls: every run has the behaviour, and histories that carry the
    marker still replay."""

    #: retired: tool policy and approvals, in every run now
    TOOL_POLICY = "tool-policy-v1"
    #: retired: the model chain described at run start and the context window managed
    CONTEXT = "context-v1"
    #: retired: turn-quality nudges, circuit breakers, finish guards and budgets
    GUARDS = "guards-v1"
    #: a `cancel` signal cancels in-flight activities instead of waiting for them
    CANCEL_IN_FLIGHT = "cancel-in-flight-v1"
    #: open approval requests and questions are announced in the memo (`REQUESTS_MEMO`), which
    #: puts them in history for audits and the event stream
    ANNOUNCE = "announce-requests-v1"
    #: a run's terminal reason is written to its memo (`TERMINAL_MEMO`) as it ends
    TERMINAL_MEMO = "terminal-memo-v1"
    #: compaction hysteresis (`capstan.core.context.RELIEF`); runs recorded before it replay
    #: with the rule off (`ContextState.hysteresis`)
    COMPACTION = "compaction-hysteresis-v1"
    #: each newly opened request starts a `notify_request` activity the run never waits for
    NOTIFY = "notify-requests-v1"
    #: a new run lists its tools and describes its model in one workflow task
    PARALLEL_START = "parallel-start-v1"
    #: a run that has taken a step continues as new before it waits for a person
    #: (`capstan.core.planner.waits_fresh`)
    WAIT_FRESH = "wait-fresh-v1"
    #: the worker's tool policy is a ceiling a run may narrow, never widen, and its
    #: `deny_arguments` always apply; executions recorded before it replay with the rules they
    #: ran with (`RunState.legacy_policy`) and take the new ones at their next continue-as-new
    LEAST_PRIVILEGE = "least-privilege-v1"
    #: a run continues as new when its history nears Temporal's limits (`capstan.core.limits`),
    #: waiting or not; runs recorded before it wait on as they did
    LIMITS = "history-limits-v1"
    #: a model call the provider still refuses (429) after its retries waits on a durable
    #: timer and is called again, instead of ending the run `model_error` (issue 30)
    PROVIDER_CAPACITY = "provider-capacity-v1"
    #: live messages past the inline inbox are kept in the blob store and read in order, never
    #: refused for room (`capstan.core.overflow`); asked the first time the bound is reached,
    #: so a run that never sees a flood records nothing
    INBOX_QUEUE = "inbox-queue-v1"


#: the ids that are `workflow.deprecate_patch` calls now (never `patched`)
RETIRED: frozenset[Patch] = frozenset({Patch.TOOL_POLICY, Patch.CONTEXT, Patch.GUARDS})
