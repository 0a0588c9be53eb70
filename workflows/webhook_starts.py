"""Webhook notifications for newly opened requests: started, never awaited.

`AgentWorkflow._announce_requests` calls `notify_opened` after it has written the open requests
to the memo. Each request not announced before (in this execution or, through the memo that
continue-as-new carries over, in an earlier one) starts one `notify_request` activity, on the
deliveries' own task queue (`capstan.core.notifications.delivery_queue`). The run never waits for it
and never fails because of it: a failure is logged by the workflow and kept
in history (`ActivityTaskFailed`). Deterministic by law, like the rest of `workflows/`.

What it costs: the first notification of an execution records a `notify-requests-v1` marker;
each request adds ActivityTaskScheduled/Started/Completed, and the completion usually wakes the
waiting run for one more workflow task (3 events). A run that ends or continues as new while a
notification still retries abandons it (its request is closed, or was announced already).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from capstan.core.activity_names import ActivityName
    from capstan.core.activity_table import ACTIVITIES
    from capstan.core.notifications import (
        NotifyInput,
        NotifyKind,
        NotifyResult,
        delivery_queue,
        newly_opened,
    )
    from capstan.core.patches import Patch
    from capstan.core.spec import ActivityTuning
    from capstan.core.workflow_io import REQUESTS_MEMO, OpenRequests

from capstan.workflows.activity_options import retry_policy
from capstan.workflows.patching import patched

__all__ = ["announced_before", "notify_opened"]


def announced_before() -> frozenset[str]:
    """The request ids the memo lists now: announced (and notified) already. Read it before
    the memo is updated."""
    memo = workflow.memo_value(REQUESTS_MEMO, None, type_hint=OpenRequests)
    if memo is None:
        return frozenset()
    ids = [a.request_id for a in memo.approvals] + [q.request_id for q in memo.questions]
    return frozenset(ids)


def notify_opened(
    run_id: str,
    requests: OpenRequests,
    announced: frozenset[str],
    tuning: ActivityTuning,
    kinds: tuple[NotifyKind, ...] | None,
) -> None:
    """Start a `notify_request` for each request of `requests` not in `announced` whose kind
    is in `kinds` (the catalog's `notify`: what the worker's hooks want; None, every kind)."""
    fresh = newly_opened(run_id, requests.approvals, requests.questions, announced, kinds)
    if not fresh or not patched(Patch.NOTIFY):
        return
    for item in fresh:
        handle = _start(item, tuning)
        handle.add_done_callback(_note_failure(item))


def _start(item: NotifyInput, tuning: ActivityTuning) -> workflow.ActivityHandle[NotifyResult]:
    spec = ACTIVITIES[ActivityName.NOTIFY_REQUEST]
    options = spec.options(tuning, None)
    return workflow.start_activity(
        ActivityName.NOTIFY_REQUEST.value,
        item,
        result_type=NotifyResult,
        # their own queue and slots: a hanging hook never holds up a model or tool call (the
        # command is the same, its queue is not compared on replay: no patch needed)
        task_queue=delivery_queue(workflow.info().task_queue),
        start_to_close_timeout=timedelta(seconds=options.start_to_close),
        retry_policy=retry_policy(options),
        # the run does not wait for a notification, so its cancellation need not either
        cancellation_type=workflow.ActivityCancellationType.ABANDON,
    )


def _note_failure(item: NotifyInput) -> Any:
    """A done-callback that takes the activity's outcome (so no task error goes unretrieved)
    and logs a notification that failed for good."""

    def noted(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            cause = getattr(exc, "cause", None) or exc
            workflow.logger.warning(
                "webhook notification for %s failed: %s", item.request_id, cause
            )

    return noted
