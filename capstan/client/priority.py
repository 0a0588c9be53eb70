"""A run's place in the queues: `RunSpec.priority` and its fairness key, as Temporal's
`Priority` (Priority & Fairness). Set where the run starts; Temporal carries it to every
activity and child workflow of the run, and to its next execution when it continues as new.

Example::

    RunSpec(task="nightly clean-up", priority=5, fairness_key="team-data")
"""

from __future__ import annotations

from temporalio.common import Priority

from capstan.core.spec import RunSpec

__all__ = ["priority_of"]


def priority_of(spec: RunSpec) -> Priority:
    """The `Priority` a run of `spec` starts with (the server's defaults where unset)."""
    return Priority(
        priority_key=spec.priority,
        fairness_key=spec.fairness_key,
        fairness_weight=spec.fairness_weight,
    )
