"""The Temporal form of an activity's options from the activity table
(`capstan.core.activity_table`): one translation for every activity the workflow starts."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from capstan.core.activity_table import ActivityOptions

__all__ = ["heartbeat_timeout", "retry_policy"]


def retry_policy(options: ActivityOptions) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=options.initial_retry),
        maximum_interval=(
            timedelta(seconds=options.max_retry) if options.max_retry is not None else None
        ),
        maximum_attempts=options.max_attempts,
        non_retryable_error_types=list(options.non_retryable) or None,
    )


def heartbeat_timeout(options: ActivityOptions) -> timedelta | None:
    return timedelta(seconds=options.heartbeat) if options.heartbeat is not None else None
