"""`python -m tests.versioned_worker`: `worker.py` with a workflow change that is incompatible
with every recorded history and has no `workflow.patched()`: a timer before each execution's
first step.
The second build of the Worker Deployment test (`tests/integration/test_deployments.py`); never
used by production code."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

import worker
from capstan.workflows.agent import AgentWorkflow

_main = AgentWorkflow._main


async def _main_after_a_timer(self: AgentWorkflow, *args: Any) -> Any:
    await workflow.sleep(timedelta(milliseconds=10))  # the incompatible change
    return await _main(self, *args)


AgentWorkflow._main = _main_after_a_timer  # type: ignore[method-assign]

if __name__ == "__main__":
    worker.main()
