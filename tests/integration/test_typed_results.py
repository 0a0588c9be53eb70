"""Typed results (issue 29): a run with an `output_schema` completes only with an answer that
matches it, returned as JSON (and as a validated type to Python callers); a run whose answers
never match ends `output_invalid` with the last answer and its errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from capstan.client.agents import AgentsError, resolve_agent
from capstan.client.threads import Threads
from capstan.client.typed import OutputTypeError, RunNotCompletedError, schema_of
from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason
from capstan.testing.fake_provider import Reply, call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.test_api_helpers import ALICE, api_client, app_for, auth, body_of
from tests.integration.test_api_stream import collect

pytestmark = pytest.mark.server


class LineItem(BaseModel):
    sku: str
    quantity: int


class Invoice(BaseModel):
    number: str
    total_cents: int
    items: list[LineItem]


GOOD = {"number": "INV-7", "total_cents": 1250, "items": [{"sku": "a-1", "quantity": 2}]}
BAD = {"number": "INV-7", "total_cents": "12.50", "items": [{"sku": "a-1"}]}


async def test_a_wrong_answer_is_refused_by_path_then_the_right_one_completes(
    agent: Agent,
) -> None:
    script = [say(call("finish", answer=BAD)), say(call("finish", answer=GOOD))]
    spec = agent.spec(output_schema=schema_of(Invoice))
    async with agent.serving(script) as live:
        run_id = await live.client.start_run(spec)
        run = await live.finish(run_id, history="typed_refused_then_valid")
        invoice = await live.client.result(run_id, output_type=Invoice)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output_format == "json" and run.status.output_format == "json"
    assert json.loads(live.client.content().resolve(run.result.output or "")) == GOOD
    assert invoice == Invoice.model_validate(GOOD)
    # the model was offered `finish` taking an Invoice, with its definitions at the top
    finish = next(t for t in run.requests[0]["tools"] if t["function"]["name"] == "finish")
    parameters = finish["function"]["parameters"]
    assert parameters["properties"]["answer"]["required"] == ["number", "total_cents", "items"]
    assert "LineItem" in parameters["$defs"]
    # the refusal named every failing place as a JSON path, and the model saw it
    refusal = run.messages(1, "tool")[-1]["content"]
    assert "$.total_cents" in refusal and "$.items[0]" in refusal and "quantity" in refusal
    assert "2 more attempts" in refusal


async def test_answers_that_never_match_end_the_run_output_invalid(agent: Agent) -> None:
    script = [say(call("finish", answer=BAD))] * 2
    spec = agent.spec(output_schema=schema_of(Invoice), guards=GuardPolicy(output_attempts=2))
    async with agent.serving(script) as live:
        run_id = await live.client.start_run(spec)
        run = await live.finish(run_id)
        with pytest.raises(RunNotCompletedError, match="output_invalid") as raised:
            await live.client.result(run_id, output_type=Invoice)
    result = run.result
    assert result.terminal_reason is TerminalReason.OUTPUT_INVALID
    assert result.output_format == "text"
    assert json.loads(live.client.content().resolve(result.output or "")) == BAD
    assert result.error is not None and "$.total_cents" in result.error
    assert raised.value.result.terminal_reason is TerminalReason.OUTPUT_INVALID
    assert result.usage.model_calls == 2


async def test_a_large_answer_is_checked_and_kept_as_a_ref(agent: Agent) -> None:
    """Past the inline limit the answer travels as a blob ref: the worker reads and checks it."""
    items = [{"sku": f"sku-{i:04d}", "quantity": i} for i in range(300)]
    big = {"number": "INV-BIG", "total_cents": 1, "items": items}
    spec = agent.spec(output_schema=schema_of(Invoice))
    async with agent.serving([say(call("finish", answer=big))]) as live:
        run_id = await live.client.start_run(spec)
        run = await live.finish(run_id)
        invoice = live.client.typed_output(run.result, Invoice)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert not isinstance(run.result.output, str)  # a ref
    assert len(invoice.items) == 300


async def test_asking_for_another_type_is_one_clear_error(agent: Agent) -> None:
    class Other(BaseModel):
        title: str

    spec = agent.spec(output_schema=schema_of(Invoice))
    async with agent.serving([say(call("finish", answer=GOOD))]) as live:
        run_id = await live.client.start_run(spec)
        await live.finish(run_id)
        with pytest.raises(OutputTypeError, match="not a valid Other"):
            await live.client.result(run_id, output_type=Other)


async def test_start_run_with_an_output_type_records_its_schema(agent: Agent) -> None:
    async with agent.serving([say(call("finish", answer=GOOD))]) as live:
        run_id = await live.client.start_run(agent.spec(), output_type=Invoice)
        invoice = await live.client.result(run_id, output_type=Invoice)
        described = await live.client.handle(run_id).fetch_history()
    assert invoice.number == "INV-7"
    started = described.events[0].workflow_execution_started_event_attributes
    recorded = json.loads(started.input.payloads[0].data)["spec"]["output_schema"]
    assert recorded == schema_of(Invoice)


async def test_a_text_run_is_unchanged(agent: Agent) -> None:
    run = await agent.run([say(call("finish", answer="plain"))])
    assert run.result.output == "plain" and run.result.output_format == "text"


async def test_the_api_takes_a_schema_and_returns_the_answer_as_json(agent: Agent) -> None:
    async with (
        agent.serving([say(call("finish", answer=GOOD))]) as live,
        api_client(app_for(live.client)) as http,
    ):
        body = {**body_of(agent.spec()), "output_schema": schema_of(Invoice)}
        r = await http.post("/api/runs", json=body, headers=auth(ALICE))
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        await live.client.result(run_id)
        shown = (await http.get(f"/api/runs/{run_id}", headers=auth(ALICE))).json()
        events: list[Any] = []
        url = f"/api/runs/{run_id}/events"
        await collect(http, url, lambda e: e.event == "end", auth(ALICE), events)
        document = (await http.get("/openapi.json")).json()
        bad = {**body_of(agent.spec()), "output_schema": {"type": "no-such-type"}}
        refused = await http.post("/api/runs", json=bad, headers=auth(ALICE))
    assert shown["output_format"] == "json" and shown["output"] == GOOD
    assert events[-1].data["output"] == GOOD and events[-1].data["output_format"] == "json"
    # the document says `output` is any JSON value, and the request takes a schema
    view = document["components"]["schemas"]["RunStatusView"]["properties"]
    assert "type" not in view["output"] or view["output"]["type"] != "string"
    assert "output_schema" in document["components"]["schemas"]["RunRequest"]["properties"]
    assert refused.status_code == 422, refused.text
    assert "output_schema" in refused.text and "\n" not in refused.json()["error"]["message"]


async def test_the_cli_takes_a_schema_file(agent: Agent, tmp_path: Path) -> None:
    schema_file = tmp_path / "invoice.schema.json"
    schema_file.write_text(json.dumps(schema_of(Invoice)))
    async with agent.serving([say(call("finish", answer=GOOD))]):
        done = await asyncio.to_thread(
            run_cli,
            agent.settings,
            "run",
            "read the invoice",
            "--output-schema",
            str(schema_file),
            "--wait",
            "--json",
        )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["output_format"] == "json" and shown["output"] == GOOD
    # a file that is not JSON, and a schema that is not one: one line each, at the command
    schema_file.write_text("{not json")
    broken = await asyncio.to_thread(
        run_cli, agent.settings, "run", "x", "--output-schema", str(schema_file)
    )
    schema_file.write_text(json.dumps({"type": 5}))
    wrong = await asyncio.to_thread(
        run_cli, agent.settings, "run", "x", "--output-schema", str(schema_file)
    )
    for failed in (broken, wrong):
        assert failed.returncode == 2 and "Traceback" not in failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "not valid JSON" in broken.stderr and "output_schema" in wrong.stderr


def test_an_agent_definition_names_its_schema_inline_or_by_file(tmp_path: Path) -> None:
    (tmp_path / "invoice.schema.json").write_text(json.dumps(schema_of(Invoice)))
    agents = tmp_path / "agents.toml"
    agents.write_text(
        '[clerk]\noutput_schema = "invoice.schema.json"\n\n'
        '[counter]\noutput_schema = { type = "integer", minimum = 0 }\n\n'
        '[broken]\noutput_schema = "missing.json"\n'
    )
    with pytest.raises(AgentsError, match=r"agent 'broken': output_schema: .*cannot be read"):
        resolve_agent(agents, "clerk", "read it")
    agents.write_text(agents.read_text().split("[broken]")[0])
    assert resolve_agent(agents, "clerk", "read it").output_schema == schema_of(Invoice)
    counter = resolve_agent(agents, "counter", "count")
    assert counter.output_schema == {"type": "integer", "minimum": 0}


async def test_a_typed_child_returns_its_json_and_the_parent_is_told_the_shape(
    agent: Agent,
) -> None:
    lead, clerk = "You lead.", "You read invoices."

    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if messages[0]["content"] == clerk:
            return say(call("finish", answer=GOOD))
        if step == 0:
            return say(call("delegate", agent="clerk", task="read the invoice"))
        return say(call("finish", answer="filed"))

    child = RunSpec(task="", system_prompt=clerk, output_schema=schema_of(Invoice))
    spec = agent.spec("file it", system_prompt=lead, delegates={"clerk": child})
    async with agent.serving(script) as live:
        run_id = await live.client.start_run(spec)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    parent = [r for r in run.requests if r["messages"][0]["content"] == lead]
    delegate = next(t for t in parent[0]["tools"] if t["function"]["name"] == "delegate")
    assert (
        "The clerk agent answers with JSON matching this schema"
        in (delegate["function"]["description"])
    )
    observed = next(m for m in parent[1]["messages"] if m["role"] == "tool")["content"]
    assert json.dumps(GOOD, separators=(",", ":")) in observed  # fenced, as any child's answer


async def test_each_run_of_a_thread_has_its_own_schema(agent: Agent) -> None:
    """A thread's runs go on from each other's conversation; each is typed by its own spec
    (a run started without one takes the previous run's, as it takes its agent and tools)."""
    script = [say(call("finish", answer=GOOD)), say(call("finish", answer="noted"))]
    async with agent.serving(script) as live:
        threads = Threads(live.client)
        typed = agent.spec("read it", output_schema=schema_of(Invoice))
        first = await threads.send("books", "read it", typed)
        one = await live.client.result(first.run_id)
        second = await threads.send("books", "note it", agent.spec("note it"))
        two = await live.client.result(second.run_id)
    assert one.output_format == "json" and two.output_format == "text"
    assert two.output == "noted" and two.terminal_reason is TerminalReason.COMPLETED
