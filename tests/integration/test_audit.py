"""Audits, replay, the event stream and telemetry, against real runs."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter

from capstan.audit.events import derive_events
from capstan.audit.history import decode_history, load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail, verify_chain
from capstan.client.runs import CapstanClient
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent, Run
from tests.integration.steer_helpers import wait_pending

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [
    say(call("list_dir"), content="Looking around.", reasoning="first, look"),
    say(call("write_file", path="big.txt", content="x" * 5000), content="Writing."),
    say(call("read_file", path="big.txt"), content="Checking."),
    say(call("finish", answer="audited"), content="Done."),
]


async def audited_run(agent: Agent) -> tuple[Run, list[WorkflowHistory]]:
    async with agent.serving(SCRIPT) as live:
        run_id = await live.start(agent.spec("audit me"))
        await wait_pending(live.client, run_id)
        await live.client.send_message(run_id, "careful with that file", "m1")
        await live.client.decide(run_id, "approve", reason="looks fine")
        run = await live.finish(run_id, history="approval_announced")
    return run, await load_histories(agent.temporal, run_id)


async def test_audit_matches_the_transcript_and_verifies(agent: Agent) -> None:
    run, histories = await audited_run(agent)
    client, run_id, steps = run.client, run.run_id, run.steps
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    records, issues = build_trail([decode_history(h) for h in histories], client.content())
    assert issues == [] and verify_chain(records) == []
    model_calls = [r for r in records if r["kind"] == "model_call"]
    tool_calls = [r for r in records if r["kind"] == "tool_call"]
    assert [r["step"] for r in model_calls] == [s.step for s in steps]
    for record, step in zip(model_calls, steps, strict=True):
        assert record["response"]["text"] == step.thought
        assert record["response"]["reasoning"] == step.reasoning
        assert record["usage"]["input_tokens"] > 0 and record["attempts"] == 1
        assert [c["arguments"] for c in record["response"]["tool_calls"]] == [
            c.arguments for c in step.tool_calls
        ]
    observed = {c.call_id: c.observation for s in steps for c in s.tool_calls}
    for record in tool_calls:
        assert record["result"] == observed[record["call_id"]]
        assert record["idempotency_key"] == f"{run_id}/{record['step']}/{record['call_id']}"
    big = next(r for r in tool_calls if r["tool"] == "write_file")
    assert json.loads(big["arguments"])["content"] == "x" * 5000  # resolved from the blob store
    (decision,) = [r for r in records if r["kind"] == "decision"]
    assert decision["identity"] == "tester@ci" and decision["action"] == "approve"
    opened, closed = [r for r in records if r["kind"] == "open_requests"]
    assert closed["approvals"] == []  # the memo follows the decision
    (asked,) = opened["approvals"]
    assert asked["request_id"] == decision["request_id"] and asked["tool"] == "write_file"
    assert asked["args_hash"] == decision["args_hash"]  # what the reviewer was shown
    assert json.loads(asked["arguments"])["content"] == "x" * 5000
    kinds = [e.kind for e in derive_events([decode_history(h) for h in histories])]
    assert kinds.index("approval_requested") < kinds.index("approval_decided")
    assert decision["reason"] == "looks fine" and len(decision["args_hash"]) == 64
    (message,) = [r for r in records if r["kind"] == "send_message"]
    assert message["text"] == "careful with that file"
    assert records[-1]["kind"] == "run_ended" and records[-1]["output"] == "audited"
    page = render_trail(records, issues, "html")
    assert page.count("<section") == len(records) and "<script" not in page
    assert "http://" not in page and "https://" not in page  # nothing loaded from outside
    assert "## 0. run started" in render_trail(records, issues, "md")


async def test_tampering_is_detected(agent: Agent) -> None:
    run, histories = await audited_run(agent)
    records, _ = build_trail([decode_history(h) for h in histories], run.client.content())
    edited = [dict(r) for r in records]
    edited[3] = {**edited[3], "identity": "mallory"}
    assert any("does not match its hash" in p for p in verify_chain(edited))
    dropped = records[:2] + records[3:]
    assert verify_chain(dropped)
    # alter a blob the run stored: the audit reports it, never skips it
    big = next(
        Path(root) / f
        for root, _, files in os.walk(agent.settings.blob_dir)
        for f in files
        if b"x" * 4000 in (Path(root) / f).read_bytes()
    )
    big.write_bytes(big.read_bytes().replace(b"xxxx", b"yyyy", 1))
    records, issues = build_trail([decode_history(h) for h in histories], run.client.content())
    assert issues and "altered" in issues[0]
    assert any("integrity" in r for r in records)


async def test_cli_audit_replay_and_export(agent: Agent, tmp_path) -> None:
    run, _ = await audited_run(agent)
    settings, run_id = agent.settings, run.run_id
    out = tmp_path / "trail.jsonl"
    done = await asyncio.to_thread(run_cli, settings, "audit", run_id, "--out", str(out))
    assert done.returncode == 0, done.stderr
    verified = await asyncio.to_thread(run_cli, settings, "audit", run_id, "--verify")
    assert verified.returncode == 0 and "verified" in verified.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    records[2]["time"] = "2000-01-01T00:00:00"  # an edited record
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    tampered = await asyncio.to_thread(run_cli, settings, "audit", "--verify-file", str(out))
    assert tampered.returncode == 1 and "does not match its hash" in tampered.stdout
    history = tmp_path / "history.json"
    exported = await asyncio.to_thread(
        run_cli, settings, "export-history", run_id, "--out", str(history)
    )
    # the run continued as new before it waited for the approval: a chain, one file each
    assert exported.returncode == 0 and "continue-as-new chain" in exported.stdout
    chain = history.with_suffix("")
    assert len(list(chain.glob("*.json"))) == 2
    one = await asyncio.to_thread(
        run_cli, settings, "replay", "--file", str(sorted(chain.glob("*.json"))[0])
    )
    assert one.returncode == 0 and "no divergence" in one.stdout
    missing = await asyncio.to_thread(run_cli, settings, "replay", "--file", str(history))
    assert missing.returncode != 0 and "no history file or directory" in missing.stderr
    replayed = await asyncio.to_thread(run_cli, settings, "replay", "--file", str(chain))
    assert replayed.returncode == 0 and "replayed 2 history file(s)" in replayed.stdout
    assert "no divergence" in replayed.stdout
    live = await asyncio.to_thread(run_cli, settings, "replay", run_id)
    assert live.returncode == 0
    broken = ROOT / "tests" / "histories" / "broken" / "parallel_tools_renamed_activity.json"
    diverged = await asyncio.to_thread(run_cli, settings, "replay", "--file", str(broken))
    assert diverged.returncode == 1 and "does not reproduce" in diverged.stdout


async def test_event_stream_is_append_only_across_continue_as_new_and_restart(
    agent: Agent,
) -> None:
    script = [say(call("list_dir", path=f"d{i}"), hold=0.3) for i in range(5)]
    script.append(say(call("finish", answer="streamed")))
    settings = agent.settings
    (settings.workspace_dir).mkdir(parents=True, exist_ok=True)
    for i in range(5):
        (settings.workspace_dir / f"d{i}").mkdir()
    snapshots: list[list[str]] = []

    async def snapshot(run_id: str) -> None:
        histories = await load_histories(agent.temporal, run_id)
        events = derive_events([decode_history(h) for h in histories])
        snapshots.append([e.model_dump_json() for e in events])

    with FakeProvider(script) as fake:  # one fake for both workers
        async with agent.serving(fake) as live:
            run_id = await live.start(agent.spec("stream", continue_as_new_every=2))
            for _ in range(6):
                await snapshot(run_id)
                await asyncio.sleep(0.3)
        await snapshot(run_id)  # worker gone
        async with agent.serving(fake) as live:  # a new worker picks the run up
            for _ in range(4):
                await snapshot(run_id)
                await asyncio.sleep(0.3)
            result = await live.client.result(run_id)
        await snapshot(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    for earlier, later in itertools.pairwise(snapshots):
        assert later[: len(earlier)] == earlier  # exactly once, in order: only ever appended
    final = [json.loads(e) for e in snapshots[-1]]
    kinds = [e["kind"] for e in final]
    assert kinds.count("continued_as_new") == 2 and kinds[-1] == "run_ended"
    assert [e["seq"] for e in final] == list(range(len(final)))
    assert kinds.count("step_started") == 6 and kinds.count("tool_finished") == 5
    watch = await asyncio.to_thread(run_cli, settings, "watch", run_id, "--from", "3", "--json")
    watched = [json.loads(line) for line in watch.stdout.splitlines()]
    assert watched == final[3:]


async def test_spans_form_a_tree_without_duplicates_on_replay(agent: Agent) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    traced = await Client.connect(
        agent.settings.address,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor(tracer)],
    )
    script = [say(call("list_dir")), say(call("finish", answer="traced"))]
    async with agent.serving(script, tracer_provider=provider, max_cached_workflows=0):
        client = CapstanClient(traced, agent.settings)  # the operator's client is traced
        with tracer.start_as_current_span("operator starts a run"):
            run_id = await client.start_run(agent.spec("trace"))
        result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    chats = [s for s in spans if s.name == "chat fake"]
    tools = [s for s in spans if s.name == "execute_tool list_dir"]
    assert len(chats) == 2 and len(tools) == 1  # once each, although every task replayed
    for chat in chats:
        parent = by_id[chat.parent.span_id]
        assert parent.name == "RunActivity:call_model"
        attrs = chat.attributes or {}
        assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "fake"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.response.finish_reasons"]
    names = [s.name for s in spans]
    assert names.count("RunActivity:call_model") == 2
    assert names.count("StartActivity:call_model") == 2
    assert len({s.context.trace_id for s in chats + tools}) == 1  # one trace from the client
    assert by_id[by_id[chats[0].parent.span_id].parent.span_id].name == "StartActivity:call_model"
