"""The audit trail of a run: every model call, tool call, decision and input, from history.

Built only from the Temporal history (across continue-as-new) and the blob store. Every blob is
checked against its hash; a missing or altered blob is reported in the record and in the
issues, never skipped. Each record carries the hash of the one before it, so the trail is
tamper-evident: `verify_chain` finds an edited, dropped or reordered record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from capstan.audit.history import Entry
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef, Text
from capstan.core.inbox import InboxQueue, TakenMessages
from capstan.runtime.blobstore import BlobError, BlobStoreError, ContentStore

__all__ = ["build_trail", "canonical", "verify_chain"]


def canonical(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)


class _Builder:
    def __init__(self, content: ContentStore) -> None:
        self.content = content
        self.issues: list[str] = []
        self._bad: list[str] = []
        self._verified: set[str] = set()

    def text(self, value: Text | None) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value
        try:
            return self.content.resolve(value)
        except BlobStoreError:
            raise  # a wrong data directory or a store that refuses us: one line, not tampering
        except BlobError as exc:
            self._bad.append(f"blob {value.sha256}: {exc}")
            return f"[blob {value.sha256} unavailable: {exc}]"

    def check(self, ref: BlobRef | None) -> None:
        if ref is None or ref.sha256 in self._verified:
            return
        try:
            self.content.read_bytes(ref.sha256)
        except BlobStoreError:
            raise  # the store is missing or refuses us: one line, not one issue per blob
        except BlobError as exc:
            self._bad.append(f"blob {ref.sha256}: {exc}")
        else:
            self._verified.add(ref.sha256)

    def check_all(self, *values: Any) -> None:
        """Verify every blob these values reference, however deep (the tool catalog a model
        was offered, chain heads, outputs): nothing a run points at goes unchecked."""
        for value in values:
            for ref in _refs(value):
                self.check(ref)

    def finish(self, record: dict[str, Any]) -> dict[str, Any]:
        if self._bad:
            record["integrity"] = list(self._bad)
            self.issues.extend(f"{record['kind']} at {record['time']}: {b}" for b in self._bad)
            self._bad = []
        return record


def _refs(value: Any) -> Iterator[BlobRef]:
    if isinstance(value, BlobRef):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _refs(getattr(value, name))
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _refs(item)


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _model_call(b: _Builder, e: Entry, rec: dict[str, Any]) -> None:
    request, reply = e.data, e.result
    b.check(getattr(request, "conversation", None))
    rec.update(
        step=request.step,
        profile=request.profile,
        request={
            "conversation": request.conversation.sha256 if request.conversation else None,
            "new_messages": [
                {"role": m.role, "origin": m.origin, "content": b.text(m.content)}
                for m in request.new_messages
            ],
        },
    )
    if reply is not None and hasattr(reply, "message"):
        b.check(reply.conversation)
        rec.update(
            model=reply.model,
            response={
                "text": b.text(reply.message.content),
                "reasoning": b.text(reply.message.reasoning),
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": b.text(c.arguments)}
                    for c in reply.message.tool_calls
                ],
                "stop_reason": reply.stop_reason,
            },
            usage=_dump(reply.usage),
            latency_ms=reply.latency_ms,
        )


def _tool_call(b: _Builder, e: Entry, rec: dict[str, Any]) -> None:
    request, outcome = e.data, e.result
    rec.update(
        step=request.step,
        call_id=request.call_id,
        tool=request.name,
        arguments=b.text(request.arguments),
        idempotency_key=request.idempotency_key,
    )
    if outcome is not None and hasattr(outcome, "kind"):
        rec["outcome"] = outcome.kind
        rec["duration_ms"] = outcome.duration_ms
        if outcome.kind == "succeeded":
            rec["result"] = b.text(outcome.output)
        else:
            rec["result"] = f"{outcome.failure}: {outcome.error}"


def _activity(b: _Builder, e: Entry) -> dict[str, Any]:
    kinds: dict[str, str] = {
        ActivityName.CALL_MODEL: "model_call",
        ActivityName.RUN_TOOL: "tool_call",
        ActivityName.LIST_TOOLS: "tools_loaded",
        ActivityName.DESCRIBE_MODEL: "model_described",
        ActivityName.COMPACT_CONTEXT: "compaction",
        ActivityName.SPILL_MESSAGES: "messages_kept",
        ActivityName.TAKE_MESSAGES: "messages_read",
    }
    rec: dict[str, Any] = {
        "kind": kinds.get(e.name, e.name),
        "attempts": e.attempt,
        "worker": e.identity,
    }
    if e.started and e.finished:
        rec["elapsed_ms"] = int((e.finished - e.started).total_seconds() * 1000)
    if e.name == ActivityName.CALL_MODEL:
        _model_call(b, e, rec)
    elif e.name == ActivityName.RUN_TOOL:
        _tool_call(b, e, rec)
    elif e.name == ActivityName.LIST_TOOLS and e.result is not None:
        rec["tools"] = list(getattr(e.result, "names", ()))
    elif e.name == ActivityName.DESCRIBE_MODEL and e.result is not None:
        rec["models"] = [_dump(m) for m in getattr(e.result, "models", ())]
    elif e.name in (ActivityName.SPILL_MESSAGES, ActivityName.TAKE_MESSAGES):
        _queue_moved(e, rec)
    elif e.result is not None or e.data is not None:
        rec["request"] = _dump(e.data)
        rec["result"] = _dump(e.result)
    if e.error:
        rec["error"] = e.error
    return rec


def _queue_moved(e: Entry, rec: dict[str, Any]) -> None:
    """A run's live messages kept in the blob store, or read back: counts and the queue (the
    messages themselves are in the model calls that read them)."""
    if isinstance(e.result, InboxQueue):  # kept
        rec["messages"] = len(getattr(e.data, "messages", ()))
        rec["queue"] = _dump(e.result)
    elif isinstance(e.result, TakenMessages):  # read
        rec["messages"] = len(e.result.messages)
        rec["queue"] = _dump(e.result.queue)


def _input(b: _Builder, e: Entry) -> dict[str, Any]:
    data = _dump(e.data) if e.data is not None else {}
    rec: dict[str, Any] = {
        "kind": "decision" if e.name == "decide" else e.name,
        "via": e.kind,
        "identity": (data.get("identity") if isinstance(data, dict) else "") or e.identity,
        "client": e.identity,
    }
    if isinstance(data, dict):
        rec.update({k: v for k, v in data.items() if k not in ("kind", "identity")})
    return rec


def _record(b: _Builder, e: Entry) -> dict[str, Any]:
    b.check_all(e.data, e.result)
    if e.kind == "activity":
        rec = _activity(b, e)
    elif e.kind in ("signal", "update"):
        rec = _input(b, e)
    elif e.kind == "run_started":
        rec = {
            "kind": "run_started",
            "spec": _dump(e.data.spec) if e.data else None,
            "continued": bool(e.extra.get("continued")),
            "client": e.identity,
        }
    elif e.kind == "open_requests" and e.data is not None:
        rec = {
            "kind": "open_requests",
            "approvals": [
                {**a.model_dump(mode="json"), "arguments": b.text(a.arguments)}
                for a in e.data.approvals
            ],
            "questions": [q.model_dump(mode="json") for q in e.data.questions],
        }
    elif e.kind == "run_ended" and e.data is not None:
        r = e.data
        rec = {
            "kind": "run_ended",
            "terminal_reason": r.terminal_reason,
            "output": b.text(r.output),
            "error": r.error,
            "steps": r.steps,
            "usage": _dump(r.usage),
        }
        if r.output_format == "json":  # a typed result (absent for text: older trails unchanged)
            rec["output_format"] = r.output_format
    else:
        rec = {"kind": e.kind, **e.extra}
        if e.error:
            rec["error"] = e.error
        if e.identity:
            rec["client"] = e.identity
    return {"time": e.time.isoformat(), "run": e.run_id, **rec}


def build_trail(
    runs: list[list[Entry]], content: ContentStore
) -> tuple[list[dict[str, Any]], list[str]]:
    """(records with their hash chain, integrity issues) for a whole continue-as-new chain."""
    b = _Builder(content)
    records: list[dict[str, Any]] = []
    prev = ""
    for entries in runs:
        for entry in entries:
            rec = b.finish(_record(b, entry))
            rec = {"seq": len(records), **rec, "prev": prev}
            rec["hash"] = hashlib.sha256((prev + canonical(rec)).encode()).hexdigest()
            prev = rec["hash"]
            records.append(rec)
    return records, b.issues


def verify_chain(records: list[dict[str, Any]]) -> list[str]:
    """Problems with the chain: an edited, dropped, inserted or reordered record."""
    problems: list[str] = []
    prev = ""
    for i, rec in enumerate(records):
        if rec.get("seq") != i:
            problems.append(f"record {i}: sequence number {rec.get('seq')} out of order")
        if rec.get("prev") != prev:
            problems.append(f"record {i}: does not follow the record before it")
        expected = hashlib.sha256((prev + canonical(rec)).encode()).hexdigest()
        if rec.get("hash") != expected:
            problems.append(f"record {i} ({rec.get('kind')}): content does not match its hash")
        prev = str(rec.get("hash", ""))
    return problems
