"""The Python client: start, steer and inspect runs.

Example::

    from capstan.client import CapstanClient
    from capstan.spec import RunSpec

    capstan = await CapstanClient.connect()          # TEMPORAL_ADDRESS or the embedded default
    run_id = await capstan.start_run(RunSpec(task="List the workspace and summarise it"))
    result = await capstan.result(run_id)
    print(result.terminal_reason, result.output)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from capstan.blobstore import ContentStore, LocalBlobStore
from capstan.config import Settings
from capstan.spec import RunResult, RunSpec, RunStatus
from capstan.workflow_io import WORKFLOW_NAME, AgentInput, CancelRequest, TranscriptView

__all__ = ["CapstanClient", "RunSummary", "connect_temporal"]


async def connect_temporal(settings: Settings) -> Client:
    """A Temporal client with Capstan's data converter (pydantic v2 payloads)."""
    return await Client.connect(
        settings.address, namespace=settings.namespace, data_converter=pydantic_data_converter
    )


class RunSummary:
    """One line of `capstan ls`."""

    def __init__(self, run_id: str, status: str, started: str) -> None:
        self.run_id = run_id
        self.status = status
        self.started = started


class CapstanClient:
    """Start and steer agent runs. Every call works while no worker is running."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> CapstanClient:
        settings = settings or Settings.from_env()
        return cls(await connect_temporal(settings), settings)

    def content(self) -> ContentStore:
        """The blob store, for resolving refs in transcripts and outputs."""
        return ContentStore(LocalBlobStore(self.settings.blob_dir))

    def handle(self, run_id: str) -> WorkflowHandle[object, RunResult]:
        return self.client.get_workflow_handle(run_id, result_type=RunResult)

    async def start_run(self, spec: RunSpec) -> str:
        """Start a run and return its id (the workflow id)."""
        run_id = spec.run_id or f"run-{uuid.uuid4().hex[:12]}"
        spec = spec.model_copy(update={"run_id": run_id})
        await self.client.start_workflow(
            WORKFLOW_NAME,
            AgentInput(spec=spec),
            id=run_id,
            task_queue=self.settings.task_queue,
        )
        return run_id

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run's result, following continue-as-new."""
        return await self.handle(run_id).result(follow_runs=True)

    async def status(self, run_id: str) -> RunStatus:
        status: RunStatus = await self.handle(run_id).query("status", result_type=RunStatus)
        return status

    async def transcript_view(self, run_id: str) -> TranscriptView:
        view: TranscriptView = await self.handle(run_id).query(
            "transcript", result_type=TranscriptView
        )
        return view

    async def cancel(self, run_id: str, reason: str = "", request_id: str | None = None) -> None:
        """Ask the run to end at its next step boundary (terminal reason `cancelled`)."""
        await self.handle(run_id).signal(
            "cancel", CancelRequest(reason=reason, id=request_id or uuid.uuid4().hex)
        )

    async def is_running(self, run_id: str) -> bool:
        desc = await self.handle(run_id).describe()
        return desc.status == WorkflowExecutionStatus.RUNNING

    async def list_runs(self, limit: int = 50) -> AsyncIterator[RunSummary]:
        query = f"WorkflowType = '{WORKFLOW_NAME}'"
        seen: set[str] = set()
        async for wf in self.client.list_workflows(query, limit=limit * 4):
            if wf.id in seen:
                continue
            seen.add(wf.id)
            status = wf.status.name.lower() if wf.status else "unknown"
            yield RunSummary(wf.id, status, wf.start_time.isoformat(timespec="seconds"))
            if len(seen) >= limit:
                return
