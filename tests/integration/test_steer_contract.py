"""The steering contract as an outside client meets it: any payload, any path, one outcome.

A decision binds to the exact call whether or not it names the request; a `steer` signal or
update of any shape, from any Temporal client (the Python SDK with raw values, the `temporal`
CLI), is either one valid input or a recorded diagnostic that changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.client import WorkflowUpdateFailedError

from capstan.client.runs import CapstanClient, RejectedError
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.steering import STEER, decode_input
from capstan.runtime.embedded import EmbeddedServer, find_temporal_binary
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending, wait_status

pytestmark = pytest.mark.server

SCRIPT = [say(call("write_file", path="a.txt", content="A")), say(call("finish", answer="ok"))]

#: the payloads the issue names, and a few more shapes
HOSTILE: list[Any] = [
    {},
    {"foo": 1},
    {"action": "approve"},
    "approve",
    {"kind": "decision"},
    None,
    [1, 2],
    {"kind": "pause", "foo": 1},
    {"kind": "grant_steps", "steps": -3},
    {"kind": "nope"},
    {"kind": "message", "text": "hi", "id": 7},
]


async def _untouched(client: CapstanClient, run_id: str, request_id: str) -> None:
    """The run still waits for the same request, unpaused, with nothing decided."""
    status = await client.status(run_id)
    assert not status.paused, status
    assert status.phase == "acting" and status.waiting_for, status
    pending = await client.pending(run_id)
    assert [r.request_id for r in pending.approvals] == [request_id]
    assert not pending.paused


async def _diagnostics(client: CapstanClient, run_id: str) -> list[str]:
    return list((await client.transcript_view(run_id)).diagnostics)


async def test_wrong_hash_without_request_id_is_refused(agent: Agent, workspace) -> None:
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        (request,) = (await wait_pending(client, run_id)).approvals
        with pytest.raises(RejectedError, match="hash mismatch"):
            await client.decide(run_id, "approve", args_hash="dead" * 16, checked=True)
        # the same mistake as a signal (what `capstan approve RUN --hash ...` sends with no
        # worker): a diagnostic, and the call does not run
        await client.decide(run_id, "approve", args_hash="0" * 64)
        diagnostics = await wait_for(
            lambda: _diagnostics(client, run_id), lambda d: any("hash mismatch" in x for x in d)
        )
        assert len(diagnostics) == 1
        await _untouched(client, run_id, request.request_id)
        assert not (workspace / "a.txt").exists()
        await client.decide(run_id, "approve", checked=True)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    (record,) = run.view.records
    assert record.args_hash == request.args_hash and record.action == "approve"


async def test_cli_approve_with_wrong_hash(agent: Agent) -> None:
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        (request,) = (await wait_pending(client, run_id)).approvals
        done = await asyncio.to_thread(
            run_cli, agent.settings, "approve", run_id, "--hash", "0" * 64
        )
        assert done.returncode != 0, done
        assert "hash mismatch" in done.stderr and "Traceback" not in done.stderr
        await _untouched(client, run_id, request.request_id)
        await client.cancel(run_id)
        await live.finish(run_id)


async def test_hostile_payloads_from_the_temporal_cli(
    agent: Agent, dev_server: EmbeddedServer
) -> None:
    """`temporal workflow signal --name steer --input ...`: what a Go or shell client sends."""
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        (request,) = (await wait_pending(client, run_id)).approvals
        inputs: list[list[str]] = [["--input", json.dumps(p)] for p in HOSTILE]
        inputs += [[], ["--input", "1", "--input", "2"]]  # no argument, two arguments
        for extra in inputs:
            await asyncio.to_thread(
                subprocess.run,
                [
                    find_temporal_binary(),
                    "workflow",
                    "signal",
                    "--address",
                    dev_server.address,
                    "-w",
                    run_id,
                    "--name",
                    STEER,
                    *extra,
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
        diagnostics = await wait_for(
            lambda: _diagnostics(client, run_id), lambda d: len(d) >= len(inputs)
        )
        assert len(diagnostics) == len(inputs), diagnostics
        assert all(d.startswith(("malformed 'steer' ignored", "ignored")) for d in diagnostics)
        await _untouched(client, run_id, request.request_id)
        await client.decide(run_id, "approve", checked=True)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert not run.status.paused


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["kind", "id", "request_id", "args_hash", "action", "text", "steps"])
            | st.text(max_size=8),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)
#: payloads that look like inputs: a real kind with arbitrary fields
NEAR_INPUTS = st.fixed_dictionaries(
    {"kind": st.sampled_from(["decision", "pause", "message", "answer", "grant_steps", "x"])},
    optional={
        "request_id": st.text(max_size=10),
        "args_hash": st.text(max_size=10),
        "action": st.sampled_from(["approve", "deny", "edit", "nope"]),
        "steps": st.integers(-5, 5) | st.text(max_size=3),
        "extra": JSON,
    },
)


def _valid(payload: object) -> bool:
    try:
        decode_input(payload)
    except ValidationError:
        return False
    return True


async def test_arbitrary_json_as_steer_changes_nothing(agent: Agent) -> None:
    """Property: a payload that is not a valid input, sent as the `steer` signal or update, is
    refused (update) or noted (signal), and the run is exactly where it was."""
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        (request,) = (await wait_pending(client, run_id)).approvals
        handle = client.handle(run_id)
        loop = asyncio.get_running_loop()
        sent = {"signals": 0}

        async def send(payload: object) -> None:
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(STEER, payload)
            await handle.signal(STEER, payload)
            sent["signals"] += 1

        @settings(
            max_examples=40,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(st.one_of(JSON, NEAR_INPUTS).filter(lambda p: not _valid(p)))
        def prop(payload: object) -> None:
            asyncio.run_coroutine_threadsafe(send(payload), loop).result(timeout=60)

        await asyncio.to_thread(prop)
        await wait_status(client, run_id, lambda s: len(s.diagnostics) >= 1)
        diagnostics = await wait_for(
            lambda: _diagnostics(client, run_id),
            lambda d: len(d) >= min(sent["signals"], 50),
        )
        assert all("ignored" in d for d in diagnostics)
        await _untouched(client, run_id, request.request_id)
        await client.decide(run_id, "approve", checked=True)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED


def test_unknown_fields_are_refused_with_a_suggestion() -> None:
    with pytest.raises(ValidationError, match=r"unknown field 'max_step' \(did you mean"):
        RunSpec(task="x", max_step=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="did you mean 'max_tool_calls'"):
        RunSpec.model_validate({"task": "x", "budgets": {"max_tool_call": 3}})
