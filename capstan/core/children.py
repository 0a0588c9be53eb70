"""What crosses between a run and the children it delegates to: pure types, no logic.

A `delegate(agent, task)` call becomes a `Delegation` (the child's workflow id and its whole
spec, decided by `capstan.core.delegation`); the child's `RunResult` comes back as a
`ChildEnded`; the run remembers each child it started as a `ChildRun` (listed in its memo, so
clients find the tree with no worker running). Fields are only ever added, with defaults.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from capstan.core.spec import RunResult, RunSpec

__all__ = ["DELEGATE_TOOL", "MAX_CHILDREN", "ChildEnded", "ChildRun", "Delegation"]

#: The loop tool offered to a run whose spec has `delegates`; never run by an activity.
DELEGATE_TOOL = "delegate"

#: The children a run remembers (and its memo lists): the most recent ones.
MAX_CHILDREN = 100


class ChildRun(BaseModel):
    """One child a run started: its workflow id (the path `parent/agent-step.index`)."""

    model_config = ConfigDict(frozen=True)

    workflow_id: str
    agent: str
    step: int
    call_id: str


class Delegation(BaseModel):
    """Start this child workflow for the call `call_id` and wait for its result."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["delegation"] = "delegation"
    call_id: str
    agent: str
    workflow_id: str
    step: int
    spec: RunSpec

    @property
    def child(self) -> ChildRun:
        return ChildRun(
            workflow_id=self.workflow_id, agent=self.agent, step=self.step, call_id=self.call_id
        )


class ChildEnded(BaseModel):
    """A child's end as the parent learns it: its result, or why there is none (it could not
    be started, or it failed as a workflow, which a Capstan run never does on purpose)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["child_ended"] = "child_ended"
    call_id: str
    agent: str
    workflow_id: str
    step: int
    result: RunResult | None = None
    error: str = ""

    @property
    def child(self) -> ChildRun:
        return ChildRun(
            workflow_id=self.workflow_id, agent=self.agent, step=self.step, call_id=self.call_id
        )

    @classmethod
    def of(cls, delegation: Delegation, result: RunResult | None, error: str = "") -> ChildEnded:
        return cls(
            call_id=delegation.call_id,
            agent=delegation.agent,
            workflow_id=delegation.workflow_id,
            step=delegation.step,
            result=result,
            error=error,
        )
