"""Following a run's history as it grows: long polls from the last event seen, never re-reads.

Temporal's `GetWorkflowExecutionHistory` with `wait_new_event` holds the request until the
history grows past the page token; each answer carries only the new events. A follower keeps
one page token per run of the continue-as-new chain, so watching a run of any length costs the
same per event. Closed runs of the chain are fetched once.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from capstan.audit.history import CLOSING, Entry, decode_history, first_run_id
from capstan.runtime.codec import decrypt_events

__all__ = ["HistoryFollower"]


class HistoryFollower:
    """The histories of one workflow id (oldest run first), grown by `poll`."""

    def __init__(self, client: Client, workflow_id: str, first_run_id: str) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.histories: list[WorkflowHistory] = []
        self._events: list[HistoryEvent] = []
        self._run_id = first_run_id
        self._token = b""
        self._decoded: list[list[Entry]] = []
        self.requests = 0  # RPCs made, for tests and benchmarks

    @classmethod
    async def start(cls, client: Client, workflow_id: str) -> HistoryFollower | None:
        """A follower from the first run of the chain, or None when no run has this id."""
        first = await first_run_id(client, workflow_id)
        return None if first is None else cls(client, workflow_id, first)

    def entries(self) -> list[list[Entry]]:
        """The decoded entries of every run so far; a finished run is decoded once."""
        for i in range(len(self._decoded), len(self.histories) - 1):
            self._decoded.append(decode_history(self.histories[i]))
        current = [decode_history(self.histories[-1])] if self.histories else []
        return [*self._decoded, *current]

    @property
    def closed(self) -> bool:
        """The whole chain has ended (its last run closed other than by continuing as new)."""
        if not self._events:
            return False
        last = self._events[-1]
        return (
            last.event_type in CLOSING
            and last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        )

    @property
    def run_id(self) -> str:
        """The execution being followed (the chain's last one, once `closed`)."""
        return self._run_id

    async def poll(self, wait: float) -> bool:
        """Wait up to `wait` seconds for new events; True when some arrived."""
        if self.closed:
            return False
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self.client.namespace,
            execution=WorkflowExecution(workflow_id=self.workflow_id, run_id=self._run_id),
            next_page_token=self._token,
            # from the first request on: only then does the server hand out a continuation
            # token for an open run (without it the next request starts over at event 1)
            wait_new_event=True,
            maximum_page_size=1000,
        )
        self.requests += 1
        try:
            response = await self.client.workflow_service.get_workflow_execution_history(
                request, retry=True, timeout=timedelta(seconds=wait)
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
                return False  # nothing new yet: the same token asks again next time
            raise
        self._token = response.next_page_token
        seen = self._events[-1].event_id if self._events else 0
        new = [e for e in response.history.events if e.event_id > seen]
        await decrypt_events(new, self.client.data_converter)
        if not new:
            return False
        self._events.extend(new)
        self._publish()
        last = new[-1]
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            attrs = last.workflow_execution_continued_as_new_event_attributes
            self._run_id, self._token, self._events = attrs.new_execution_run_id, b"", []
            self.histories.append(WorkflowHistory(self.workflow_id, []))
        return True

    def _publish(self) -> None:
        current = WorkflowHistory(self.workflow_id, list(self._events))
        if self.histories:
            self.histories[-1] = current
        else:
            self.histories.append(current)
