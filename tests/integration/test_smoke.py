from __future__ import annotations

import httpx
import pytest

from capstan.client import CapstanClient
from capstan.config import Settings
from capstan.spec import RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from worker import build_worker

pytestmark = pytest.mark.server


async def test_smoke(temporal, settings: Settings, workspace) -> None:
    (workspace / "notes.txt").write_text("the answer is 42")
    script = [
        say(call("list_dir"), call("read_file", path="notes.txt")),
        say(call("finish", answer="42")),
    ]
    with FakeProvider(script) as fake:
        env = {"CAPSTAN_MODEL": "openai:fake", "OPENAI_BASE_URL": fake.base_url}
        async with httpx.AsyncClient() as http, build_worker(temporal, settings, http, env):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(RunSpec(task="find the answer"))
            result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    assert result.output == "42"
