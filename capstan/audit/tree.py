"""The audit of a delegation tree: a run's history with its children's, for one hash chain.

A parent's history shows that it started a child and what came back, not what the child did.
`tree_entries` reads the children from the parent's history (each child workflow it started)
and puts each child's entries, after a `child` entry naming it, before the parent's end, depth
first: `build_trail` over them chains every record of the tree, so an edited, dropped or
reordered record of any child breaks the parent's chain too. Every record keeps the run it
belongs to (`run`); a `child` record names the child's id (its path) and agent. A run with no
children reads as before.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from capstan.audit.history import Entry, decode_history, load_histories

__all__ = ["children_started", "tree_entries"]

#: a tree deeper than this is cut (a child's `max_depth` is checked by the loop; this only
#: bounds what an audit reads from a history it did not write)
MAX_AUDIT_DEPTH = 8


def children_started(histories: list[WorkflowHistory]) -> list[Entry]:
    """A `child` entry for each child workflow the run started, in the order it started them."""
    found: list[Entry] = []
    for history in histories:
        run_id = _run_id(history)
        for event in history.events:
            if event.event_type != EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                continue
            child = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            found.append(
                Entry(
                    "child",
                    run_id,
                    event.event_id,
                    event.event_time.ToDatetime().replace(tzinfo=None),
                    extra={"child": child, "agent": _agent_of(child)},
                )
            )
    return found


async def tree_entries(
    client: Client, histories: list[WorkflowHistory], depth: int = 0
) -> list[list[Entry]]:
    """The entries of the run (its continue-as-new chain, `histories`) and of every child it
    started, depth first, each child's before the run's end; `build_trail` chains them."""
    runs = [decode_history(h) for h in histories]
    children = children_started(histories) if depth < MAX_AUDIT_DEPTH else []
    if not children:
        return runs
    ending: list[list[Entry]] = []
    if runs and runs[-1] and runs[-1][-1].kind == "run_ended":
        ending = [[runs[-1][-1]]]
        runs[-1] = runs[-1][:-1]
    blocks: list[list[Entry]] = []
    for child in children:
        blocks.append([child])
        below = await load_histories(client, str(child.extra["child"]))
        blocks += await tree_entries(client, below, depth + 1)
    return [*runs, *blocks, *ending]


def _run_id(history: WorkflowHistory) -> str:
    if not history.events:
        return history.workflow_id
    started = history.events[0].workflow_execution_started_event_attributes
    return started.original_execution_run_id or history.workflow_id


def _agent_of(child_id: str) -> str:
    """`researcher` from a child id `parent/researcher-1.0` (the path the loop gives it)."""
    return child_id.rsplit("/", 1)[-1].rsplit("-", 1)[0]
