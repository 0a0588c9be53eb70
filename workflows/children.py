"""The children of a run (`delegate`): child workflows started, awaited, paused with it.

`AgentWorkflow._run_tools` runs a turn's delegations beside its tool calls. Each child is the
same workflow type on the same task queue, under the id the loop chose (the path
`parent/agent-STEP.INDEX`), and is cancelled when its parent closes (`REQUEST_CANCEL`); the
parent's cancellation reaches it through the cancelled await. Its `RunResult`, whatever it is,
comes back as a `ChildEnded` for the loop to fold. While children run, pausing or resuming the
parent is forwarded to them as `steer` signals. Deterministic by law, like the rest of
`workflows/`: ids of the forwarded inputs come from the parent's run id, step and a count.
A child inherits its parent's tenant (`INHERITED_MEMO`), so it belongs to whoever owns the tree.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from temporalio import workflow
from temporalio.exceptions import (
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from capstan.core.agent_input import AgentInput
    from capstan.core.children import ChildEnded, ChildRun, Delegation
    from capstan.core.spec import RunResult
    from capstan.core.steering import STEER, PauseRequest, ResumeRequest, SteeringInput
    from capstan.core.workflow_io import CHILDREN_MEMO, INHERITED_MEMO, WORKFLOW_NAME

__all__ = ["Children"]


class Children:
    """The children of one execution that are running now, and the pause state each was sent."""

    def __init__(self) -> None:
        self._told: dict[str, bool] = {}

    @staticmethod
    def announce(children: Sequence[ChildRun]) -> None:
        """Name the run's children in its memo as they start, so clients find the tree (and
        the children's open requests) without a worker."""
        workflow.upsert_memo({CHILDREN_MEMO: list(children)})

    async def run(self, work: Delegation) -> ChildEnded:
        """One child run, to its end."""
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW_NAME,
                AgentInput(spec=work.spec),
                id=work.workflow_id,
                result_type=RunResult,
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                memo=_inherited() or None,
            )
        except WorkflowAlreadyStartedError:
            return ChildEnded.of(work, None, f"a run with the id {work.workflow_id} exists")
        self._told[work.workflow_id] = False
        try:
            result: RunResult = await handle
            return ChildEnded.of(work, result)
        except ChildWorkflowError as exc:
            if is_cancelled_exception(exc):
                raise asyncio.CancelledError from exc
            return ChildEnded.of(work, None, str(exc.cause or exc))
        finally:
            self._told.pop(work.workflow_id, None)

    async def forward_pause(self, paused: Callable[[], bool], tag: Callable[[], str]) -> None:
        """Until cancelled: send each running child the parent's pause state when it differs
        from what the child was last sent (`tag()`: the id prefix of the inputs sent)."""
        sent = 0
        while True:
            await workflow.wait_condition(lambda: self._unsent(paused()))
            now = paused()
            for child_id, told in list(self._told.items()):
                if told == now or child_id not in self._told:
                    continue
                sent += 1
                item_id = f"{tag()}/{'pause' if now else 'resume'}-{sent}"
                item: SteeringInput = (
                    PauseRequest(id=item_id, identity="parent", reason="the parent run paused")
                    if now
                    else ResumeRequest(id=item_id, identity="parent")
                )
                self._told[child_id] = now
                with contextlib.suppress(FailureError):  # it ended meanwhile
                    await workflow.get_external_workflow_handle(child_id).signal(STEER, item)

    def _unsent(self, paused: bool) -> bool:
        return any(told != paused for told in self._told.values())


def _inherited() -> dict[str, object]:
    """The parent's memo entries a child keeps (its tenant): a child is its parent's."""
    memo = workflow.memo()
    return {key: workflow.memo_value(key) for key in INHERITED_MEMO if key in memo}
