"""Forks: a new run that goes on from another run's recorded conversation after step N.

The fork's model call 1 gets exactly what the parent's call N+1 got (the head of the
conversation chain, a content hash, and the messages not yet in it: the tool results of step N,
live messages, nudges), read from the parent's history. Nothing of the prefix is copied, called
or run again: the fork's conversation *is* the parent's chain up to there, and its own segments
follow. With another system prompt the chain is written again with that first message changed
(a new chain: the prompt is the first thing every later hash covers).

What a fork does not rewind is the world its tools touched: it runs in the parent's workspace as
it is now (`RunSpec.workspace`), not as it was at step N.

    run_id = await fork(client, "run-1234", at_step=2, model="gpt-4o")
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from capstan.audit.history import Entry, decode_history, load_histories
from capstan.client.runs import CapstanClient, RunNotFoundError
from capstan.core.activity_io import CallModelInput, ModelReply
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.errors import CapstanError
from capstan.core.messages import Message
from capstan.core.spec import ForkPoint, RunResult, RunSpec
from capstan.core.workflow_io import StartInput
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import append_segment, load_chain

__all__ = ["ForkError", "ForkStart", "fork", "fork_spec", "fork_start"]


class ForkError(CapstanError):
    """A fork that cannot be made: a step past the run's end (`field` "at_step"), or changes
    its spec cannot take (`field` "spec")."""

    def __init__(self, message: str, field: str = "at_step") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ForkStart:
    """What the parent's model call after `step` was given, and the parent's spec."""

    spec: RunSpec
    step: int
    head: BlobRef | None
    pending: tuple[Message, ...]
    tokens: int


def _calls(entries: list[Entry]) -> dict[int, tuple[CallModelInput, ModelReply | None]]:
    """Each step's model call: its input (every attempt of a step has the same one) and the
    reply it ended with, by the step it made."""
    calls: dict[int, tuple[CallModelInput, ModelReply | None]] = {}
    for e in entries:
        if e.kind != "activity" or e.name != ActivityName.CALL_MODEL:
            continue
        if not isinstance(e.data, CallModelInput):
            continue
        reply = e.result if isinstance(e.result, ModelReply) else None
        if reply is not None or e.data.step not in calls:
            calls[e.data.step] = (e.data, reply)
    return calls


def _result(entries: list[Entry]) -> RunResult | None:
    for e in reversed(entries):
        if e.kind == "run_ended" and isinstance(e.data, RunResult):
            return e.data
    return None


async def fork_start(client: CapstanClient, run_id: str, at_step: int) -> ForkStart:
    """Where a fork of `run_id` after step `at_step` starts, from the run's history: ForkError
    for a step the run has not made, RunNotFoundError for an unknown run."""
    histories = await load_histories(client.client, run_id)
    if not histories:
        raise RunNotFoundError(f"no run {run_id!r}")
    entries = [e for h in histories for e in decode_history(h)]
    started = next((e for e in entries if e.kind == "run_started"), None)
    if started is None or not isinstance(started.data, StartInput):
        raise ForkError(f"run {run_id!r} has no readable start (another workflow type?)", "run")
    spec = started.data.spec
    calls = _calls(entries)
    made = [s for s, (_, reply) in calls.items() if reply is not None]
    last = max(made, default=0)
    if at_step < 0 or at_step > last:
        raise ForkError(
            f"run {run_id!r} has made {last} model call(s): --at-step is 0..{last}, not {at_step}"
        )
    following = calls.get(at_step + 1)
    if following is not None:
        request, _ = following
        tokens = 0
        if at_step > 0 and (reply := calls[at_step][1]) is not None:
            tokens = reply.usage.input_tokens + reply.usage.output_tokens
        return ForkStart(spec, at_step, request.conversation, request.new_messages, tokens)
    result = _result(entries)  # after the last step: where the run's result left it
    if result is None:
        raise ForkError(
            f"run {run_id!r} is still at step {last}: fork it at 0..{max(last - 1, 0)}, or once "
            "it has ended"
        )
    return ForkStart(spec, at_step, result.conversation, result.tail, result.context_tokens)


def _with_system(
    store: ContentStore, start: ForkStart, system: str
) -> tuple[BlobRef | None, tuple[Message, ...]]:
    """The conversation with its system prompt replaced: in the pending messages (a fork at
    step 0), else in the chain, written again from its first segment."""

    def swap(messages: list[Message]) -> list[Message]:
        return [
            m.model_copy(update={"content": system}) if m.role == "system" else m for m in messages
        ]

    if start.head is None:
        return None, tuple(swap(list(start.pending)))
    head: BlobRef | None = None
    for stored in load_chain(store, start.head):
        segment = stored.segment
        compacted = (
            BlobRef(sha256=segment.compacted_from, size=0) if segment.compacted_from else None
        )
        messages = swap(segment.messages) if head is None else segment.messages
        head = append_segment(store, head, segment.step, messages, compacted)
    return head, start.pending


async def fork_spec(
    client: CapstanClient,
    run_id: str,
    at_step: int,
    *,
    model: str | None = None,
    system: str | None = None,
    overrides: dict[str, Any] | None = None,
    narrow: Callable[[RunSpec], RunSpec] | None = None,
) -> RunSpec:
    """The spec of a fork of `run_id` after `at_step`: the parent's (through `narrow`, when
    the caller may do less than the parent's starter), with `overrides` (public `RunSpec`
    fields), `model` and `system` (the system prompt) applied, pointing at the parent's
    conversation. Not admitted yet: the caller checks what the overrides ask for."""
    start = await fork_start(client, run_id, at_step)
    head, pending = start.head, start.pending
    if system is not None:
        head, pending = await asyncio.to_thread(_with_system, client.content(), start, system)
    parent = narrow(start.spec) if narrow is not None else start.spec
    fields = {**parent.model_dump(exclude_unset=True), **(overrides or {})}
    if model is not None:
        fields["model"] = model
    if system is not None:
        fields["system_prompt"] = system
    fields.update(
        run_id=None,
        thread=None,
        continues=head,
        continues_tail=pending,
        continues_tokens=start.tokens,
        continues_unread=None,
        forked_from=ForkPoint(run_id=run_id, step=at_step),
    )
    try:
        return RunSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise ForkError(f"the fork's spec is invalid at {where}: {first['msg']}", "spec") from None


async def fork(
    client: CapstanClient,
    run_id: str,
    at_step: int,
    *,
    model: str | None = None,
    system: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> str:
    """Start a fork of `run_id` after step `at_step` (see the module docstring) as the operator
    and return its run id. Its history records the parent and the step (`spec.forked_from`)."""
    spec = await fork_spec(client, run_id, at_step, model=model, system=system, overrides=overrides)
    return await client.start_run(spec)  # admitted there, as the operator
