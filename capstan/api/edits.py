"""Edited arguments checked before they are sent: the tool's schema and the run's policy.

The run re-validates every edit itself; checking here first lets the reviewer see what is wrong
(422, naming the field) instead of a decision the run ignores. The tool catalog and the spec are
read from the first run of the chain, where the run recorded them.
"""

from __future__ import annotations

from capstan.audit.follow import HistoryFollower
from capstan.client.runs import CapstanClient
from capstan.core.activity_names import ActivityName
from capstan.core.policy import check_arguments
from capstan.core.tooling import ToolCatalog, ToolInfo
from capstan.core.workflow_io import StartInput

__all__ = ["edit_problem"]


async def edit_problem(client: CapstanClient, run_id: str, tool: str, arguments: str) -> str | None:
    """Why `arguments` may not run as `tool` in this run, or None."""
    follower = await HistoryFollower.start(client.client, run_id)
    if follower is None:
        return None
    await follower.poll(wait=5.0)  # the first page of the first run: start and tool catalog
    entries = follower.entries()[0] if follower.histories else []
    started = next((e.data for e in entries if e.kind == "run_started"), None)
    catalog = next(
        (
            e.result
            for e in entries
            if e.name == ActivityName.LIST_TOOLS and isinstance(e.result, ToolCatalog)
        ),
        None,
    )
    if not isinstance(started, StartInput) or catalog is None:
        return None  # the run validates the edit itself
    info = catalog.tools.get(tool, ToolInfo())
    return check_arguments(tool, info, started.spec, arguments)
