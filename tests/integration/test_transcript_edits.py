"""The transcript keeps both versions of an edited call: what the model asked for and what ran,
with a worker answering and, after it stopped, rebuilt from history."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client

from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import run_cli, running_worker
from tests.integration.steer_helpers import wait_pending

pytestmark = pytest.mark.server


def _write_call(steps: list[dict[str, object]]) -> dict[str, object]:
    calls = [c for s in steps for c in s["tool_calls"]]  # type: ignore[attr-defined]
    return next(c for c in calls if c["name"] == "write_file")


async def test_edited_arguments_show_in_the_transcript(
    temporal: Client, settings: Settings, workspace
) -> None:
    script = [
        say(call("write_file", path="a.txt", content="model")),
        say(call("finish", answer="written")),
    ]
    edited = json.dumps({"path": "b.txt", "content": "reviewer"})
    client = CapstanClient(temporal, settings)
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            run_id = await client.start_run(RunSpec(task="write a file"))
            await wait_pending(client, run_id)
            await client.decide(run_id, "edit", arguments=edited, checked=True)
            assert (await client.result(run_id)).terminal_reason is TerminalReason.COMPLETED
            live = await asyncio.to_thread(run_cli, settings, "transcript", run_id, "--json")
            text = await asyncio.to_thread(run_cli, settings, "transcript", run_id)
    offline = await asyncio.to_thread(run_cli, settings, "transcript", run_id, "--json")
    for out in (live, offline):
        assert out.returncode == 0, out.stderr
        write = _write_call(json.loads(out.stdout))
        assert json.loads(str(write["arguments"]))["path"] == "a.txt"
        assert json.loads(str(write["executed_arguments"]))["path"] == "b.txt"
    assert "edited  write_file(" in text.stdout
    assert (workspace / "b.txt").read_text() == "reviewer"
