"""`audit --verify` covers every blob a run references, including the tool catalog the model
was offered, and a missing blob store is named, not reported as tampering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from capstan.audit.history import decode_history, load_histories
from capstan.audit.trail import build_trail
from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.tooling import ToolCatalog
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import run_cli, running_worker

pytestmark = pytest.mark.server


async def test_an_altered_tool_catalog_is_detected(temporal: Client, settings: Settings) -> None:
    script = [say(call("list_dir")), say(call("finish", answer="ok"))]
    client = CapstanClient(temporal, settings)
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            run_id = await client.start_run(RunSpec(task="look"))
            assert (await client.result(run_id)).terminal_reason is TerminalReason.COMPLETED
    runs = [decode_history(h) for h in await load_histories(temporal, run_id)]
    _, issues = build_trail(runs, client.content())
    assert issues == []
    catalog = next(e.result for run in runs for e in run if isinstance(e.result, ToolCatalog))
    ref = catalog.specs_ref
    path = settings.blob_dir / ref.sha256[:2] / ref.sha256[2:]
    path.write_bytes(path.read_bytes().replace(b"list_dir", b"rm_rf_dir", 1))
    _, issues = build_trail(runs, client.content())
    assert any(ref.sha256 in issue for issue in issues), issues


async def test_a_missing_blob_store_is_named_not_called_tampering(
    temporal: Client, settings: Settings, tmp_path: Path
) -> None:
    script = [say(call("write_file", path="big.txt", content="x" * 5000)), say(call("finish"))]
    client = CapstanClient(temporal, settings)
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            run_id = await client.start_run(RunSpec(task="write", auto_approve=True))
            await client.result(run_id)
    elsewhere = settings.model_copy(update={"data_dir": tmp_path / "not-the-data-dir"})
    out = await asyncio.to_thread(run_cli, elsewhere, "audit", run_id, "--verify")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip() == f"capstan: blob store not found at {elsewhere.blob_dir}"
    assert not elsewhere.data_dir.exists()  # a read never creates directories
