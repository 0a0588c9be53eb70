"""The bundled offline model (SmolLM2-135M on llama.cpp) through the durable loop.

Needs the `local` extra, which `.ci/run` installs; skipped with a reason where it is missing.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest

from capstan.client.runs import CapstanClient
from capstan.client.transcript import build_transcript
from capstan.core.spec import ActivityTuning, GuardPolicy, RunSpec, TerminalReason
from capstan.runtime import local_model
from capstan.runtime.config import Settings
from tests.conftest import free_port
from tests.integration.test_crash import start_worker

pytestmark = [
    pytest.mark.server,
    pytest.mark.local_model,
    pytest.mark.slow,
    pytest.mark.skipif(not local_model.available(), reason="the `local` extra is not installed"),
]

NOTES = "Harbour log\nThe crane lifts 42 containers per hour.\n"
TUNING = ActivityTuning(model_heartbeat=5.0, model_initial_retry=0.5, tool_heartbeat=5.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[local_model.LocalModelServer]:
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with local_model.LocalModelServer(free_port(), log=log) as server:
        yield server


def local_spec() -> RunSpec:
    return RunSpec(
        task="Read notes.txt and tell me how many containers the crane lifts per hour.",
        system_prompt=(
            "You are an agent that uses tools. Call read_file to read a file. "
            "When you know the answer, call finish with the answer."
        ),
        model=local_model.LOCAL_PROFILE,
        allowed_tools=("read_file",),
        max_steps=6,
        tuning=TUNING,
        # a tiny model may try to finish before reading: refuse that once, with the reason
        guards=GuardPolicy(finish_requires=("read_file",)),
    )


def env_for(server: local_model.LocalModelServer) -> dict[str, str]:
    return {"CAPSTAN_LOCAL_MODEL_URL": server.base_url, "CAPSTAN_MODEL": local_model.LOCAL_PROFILE}


async def test_real_model_run_calls_a_tool_and_finishes(
    temporal, settings: Settings, served
) -> None:
    import httpx

    from capstan.host.config import load_worker_config
    from capstan.worker import build_worker

    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    (settings.workspace_dir / "notes.txt").write_text(NOTES)
    async with (
        httpx.AsyncClient() as http,
        build_worker(temporal, load_worker_config(settings, env_for(served)), http),
    ):
        client = CapstanClient(temporal, settings)
        run_id = await client.start_run(local_spec())
        result = await asyncio.wait_for(client.result(run_id), 600)
        steps = build_transcript(client.content(), await client.transcript_view(run_id))
    calls = [c for s in steps for c in s.tool_calls if c.name != "finish"]
    # a 135M model is a smoke test of the machinery, not of reasoning: it must call a tool
    # through the structured mode and end with a finish; what it concludes is its own affair
    assert result.terminal_reason is TerminalReason.COMPLETED, (result, steps)
    assert calls and all(c.observation is not None for c in calls)
    assert result.output is not None and result.usage.model_calls >= 2


async def test_real_model_run_survives_a_killed_worker(
    temporal, settings: Settings, served
) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    (settings.workspace_dir / "notes.txt").write_text(NOTES)
    client = CapstanClient(temporal, settings)
    first = start_worker(settings, None, env_for(served))
    try:
        run_id = await client.start_run(local_spec())
        for _ in range(600):  # kill once the run is under way (its first model reply is in)
            await asyncio.sleep(0.1)
            try:
                if (await client.status(run_id)).step >= 1:
                    break
            except Exception:
                continue
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    second = start_worker(settings, None, env_for(served))
    try:
        result = await asyncio.wait_for(client.result(run_id), 600)
    finally:
        second.terminate()
        second.wait(timeout=15)
    assert result.terminal_reason is TerminalReason.COMPLETED, result


async def test_real_model_returns_a_schema_valid_object(
    temporal, settings: Settings, served
) -> None:
    """A typed run on the bundled model: its calls are constrained by a grammar built from the
    offered tools' schemas, the typed `finish` among them, so its answer matches the schema
    (checked again by the worker)."""
    import httpx

    from capstan.host.config import load_worker_config
    from capstan.worker import build_worker

    schema = {
        "type": "object",
        "properties": {"containers_per_hour": {"type": "integer"}, "unit": {"enum": ["hour"]}},
        "required": ["containers_per_hour", "unit"],
        "additionalProperties": False,
    }
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    (settings.workspace_dir / "notes.txt").write_text(NOTES)
    spec = local_spec().model_copy(update={"output_schema": schema})
    async with (
        httpx.AsyncClient() as http,
        build_worker(temporal, load_worker_config(settings, env_for(served)), http),
    ):
        client = CapstanClient(temporal, settings)
        run_id = await client.start_run(RunSpec.model_validate(spec.model_dump()))
        result = await asyncio.wait_for(client.result(run_id), 600)
        data = client.output_data(result)
    assert result.terminal_reason is TerminalReason.COMPLETED, result.error
    assert result.output_format == "json"
    assert isinstance(data["containers_per_hour"], int) and data["unit"] == "hour"


async def test_an_eval_on_the_bundled_model(temporal, settings: Settings, served, tmp_path) -> None:
    """A tiny dataset on the real (tiny) model: the case runs in its own workspace with its
    fixture, and the report says what it did."""
    import httpx

    from capstan.client.evals import load_dataset, run_eval
    from capstan.host.config import load_worker_config
    from capstan.worker import build_worker

    (tmp_path / "notes.txt").write_text(NOTES)
    spec = local_spec()
    dataset = tmp_path / "tiny.toml"
    dataset.write_text(
        f"""
defaults = {{ model = "{spec.model}", allowed_tools = ["read_file"], max_steps = 6 }}

[[case]]
name = "reads the notes"
task = "{spec.task}"
fixtures = {{ "notes.txt" = "notes.txt" }}
spec = {{ guards = {{ finish_requires = ["read_file"] }}, system_prompt = "{spec.system_prompt}" }}
expect = {{ terminal_reason = "completed", tools_called = ["read_file"] }}
"""
    )
    async with (
        httpx.AsyncClient() as http,
        build_worker(temporal, load_worker_config(settings, env_for(served)), http),
    ):
        client = CapstanClient(temporal, settings)
        report = await asyncio.wait_for(run_eval(client, load_dataset(dataset)), 600)
    (case,) = report.cases
    assert case.passed, case
    assert case.run_id is not None and case.steps >= 2
