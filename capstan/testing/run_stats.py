"""What a long run cost: compactions (from its history), blob-store bytes against the unique
content the run produced, and the size of its largest history.

Used by the long-run compaction test and by `bench/`. Reads history and the blob store only.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import load_conversation

__all__ = ["RunStats", "blob_bytes", "run_stats", "unique_content_bytes"]


@dataclass
class RunStats:
    #: compact_context activities by strategy (warn, prune, summarize)
    compactions: Counter[str]
    #: steps (model calls) at which anything was pruned or summarised
    compaction_steps: int
    model_calls: int
    #: bytes of the largest single run's history in the continue-as-new chain
    largest_run_history_bytes: int
    runs: int

    @property
    def rewrites(self) -> int:
        """Compactions that write to the conversation (a warn writes nothing)."""
        return self.compactions["prune"] + self.compactions["summarize"]


def _activity(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    attrs = event.get("activityTaskScheduledEventAttributes")
    if not attrs:
        return None
    name = str(attrs.get("activityType", {}).get("name", ""))
    payloads = attrs.get("input", {}).get("payloads", [])
    try:
        data = json.loads(base64.b64decode(payloads[0]["data"])) if payloads else {}
    except (ValueError, KeyError):
        data = {}  # an encrypted payload: counted, strategy unknown
    return name, data if isinstance(data, dict) else {}


async def run_stats(client: Client, workflow_id: str) -> RunStats:
    """Compactions, model calls and history sizes over every run of the chain."""
    run_ids = [wf.run_id async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    compactions: Counter[str] = Counter()
    steps_compacted: set[int] = set()
    calls = largest = 0
    for run_id in run_ids:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        text = history.to_json()
        largest = max(largest, len(text))
        for event in json.loads(text)["events"]:
            found = _activity(event)
            if found is None:
                continue
            name, data = found
            if name == "call_model":
                calls += 1
            elif name == "compact_context":
                strategy = str(data.get("strategy", "unknown"))
                compactions[strategy] += 1
                if strategy != "warn":
                    steps_compacted.add(int(data.get("step", -1)))
    return RunStats(compactions, len(steps_compacted), calls, largest, len(run_ids))


def blob_bytes(root: Path) -> int:
    """Bytes of every blob in a local store."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def unique_content_bytes(store: ContentStore, head: BlobRef | None) -> int:
    """The content the run produced, each piece once: every message of the history as it
    happened (JSON, as segments hold it) plus every distinct blob those messages name."""
    messages = load_conversation(store, head, original=True)
    refs: dict[str, int] = {}
    for m in messages:
        for text in _texts(m):
            if isinstance(text, BlobRef):
                refs[text.sha256] = text.size
    return sum(len(m.model_dump_json()) for m in messages) + sum(refs.values())


def _texts(m: Message) -> list[object]:
    return [m.content, m.reasoning, *(c.arguments for c in m.tool_calls)]
