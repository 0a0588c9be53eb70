"""`capstan ls` lists every run even when one of them cannot be decoded with this client's keys:
that run shows `?` and a one-line note, the others list as usual."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from capstan.client.runs import CapstanClient, RunSummary, connect_temporal
from capstan.core.spec import TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for
from tests.integration.test_codec_runs import new_key, sealed, sealed_namespace  # noqa: F401

pytestmark = pytest.mark.server


async def listed(settings: Settings, run_id: str) -> RunSummary:
    client = CapstanClient(await connect_temporal(settings), settings)

    async def find() -> RunSummary | None:
        rows = [r async for r in client.list_runs(limit=1000)]
        return next((r for r in rows if r.run_id == run_id), None)

    found = await wait_for(find, lambda r: r is not None and r.status == "completed")
    assert found is not None
    return found


async def test_ls_survives_a_run_under_other_keys(sealed: Agent) -> None:  # noqa: F811
    run = await sealed.run([say(call("finish", answer="sealed"))])
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    right = await listed(sealed.settings, run.run_id)
    assert (right.terminal_reason, right.note) == ("completed", None)
    other_keys = sealed.settings.model_copy(update={"codec_keys": SecretStr(new_key("k1"))})
    wrong = await listed(other_keys, run.run_id)
    assert wrong.terminal_reason == "?"
    assert wrong.note is not None and "\n" not in wrong.note
    assert wrong.note.startswith("its ending cannot be decoded: a payload does not decrypt")
