"""Encryption at rest, end to end: with codec keys, the Temporal database (the dev server's SQLite
files) and the blob store hold no plaintext of a run — task, tool arguments, tool output — while
the run, its transcript, its audit and its replay work as before. Without keys the same grep
finds everything (the control that proves the grep can fail). A wrong key is an error."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from pydantic import SecretStr
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Replayer

from capstan.audit.history import decode_history, load_histories
from capstan.audit.trail import build_trail
from capstan.client.runs import connect_temporal
from capstan.core.spec import RunResult, TerminalReason
from capstan.runtime.blobs import keyring_for
from capstan.runtime.codec import CodecError, data_converter, decrypt_history
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.testing.fake_provider import call, say
from capstan.workflows.agent import AgentWorkflow
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent, Run
from tests.integration.steer_helpers import wait_for

pytestmark = pytest.mark.server


def new_key(key_id: str) -> str:
    return f"{key_id}:{base64.b64encode(os.urandom(32)).decode()}"


@dataclass
class Canaries:
    """Unique strings that reach Temporal and the blob store only through one path each."""

    task: str
    argument: str  # a tool argument, as the model wrote it
    output: str  # what the tool returned (upper-cased argument): only the tool writes it
    blob: str  # a large tool output, stored as a blob

    @classmethod
    def new(cls) -> Canaries:
        tag = uuid.uuid4().hex[:10]
        argument = f"arg-canary-{tag}"
        return cls(f"task-canary-{tag}", argument, argument.upper(), f"blobcanary{tag}")

    def all(self) -> list[str]:
        return [self.task, self.argument, self.output, self.blob]


async def canary_run(agent: Agent, workspace: Path, canaries: Canaries) -> Run:
    (workspace / "big.txt").write_text(f"{canaries.blob} line\n" * 400)
    agent.configure(tools_module="tests.sample_tools")
    script = [
        say(call("shout", text=canaries.argument), call("read_file", path="big.txt")),
        say(call("finish", answer="done")),
    ]
    run = await agent.run(script, agent.spec(task=f"do {canaries.task}", auto_approve=True))
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    return run


def found_in(root: Path, canaries: Canaries) -> set[str]:
    """Which canaries appear in any file under `root`."""
    found = set()
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found |= {c for c in canaries.all() if c.encode() in data}
    return found


SEALED_NAMESPACE = "capstan-sealed"


@pytest.fixture(scope="session")
async def sealed_namespace(temporal: Client) -> str:
    """A namespace of its own for encrypted runs, as a deployment would have: clients without
    keys (every other test) never list them."""
    request = RegisterNamespaceRequest(
        namespace=SEALED_NAMESPACE, workflow_execution_retention_period=Duration(seconds=86400)
    )
    with contextlib.suppress(RPCError):  # already there (a reused server)
        await temporal.workflow_service.register_namespace(request)
    describe = DescribeNamespaceRequest(namespace=SEALED_NAMESPACE)
    await wait_for(lambda: temporal.workflow_service.describe_namespace(describe), bool, 30)
    return SEALED_NAMESPACE


@pytest.fixture
async def sealed(settings: Settings, sealed_namespace: str) -> Agent:
    """An agent whose worker and client share a codec key (and a data converter with it)."""
    keyed = settings.model_copy(
        update={"codec_keys": SecretStr(new_key("k1")), "namespace": sealed_namespace}
    )
    return Agent(await connect_temporal(keyed), keyed)


async def test_without_keys_the_canaries_are_in_the_clear(
    agent: Agent, workspace: Path, dev_server: EmbeddedServer
) -> None:
    canaries = Canaries.new()
    await canary_run(agent, workspace, canaries)
    assert found_in(dev_server.data_dir, canaries) >= {canaries.task, canaries.output}
    assert canaries.blob in found_in(agent.settings.blob_dir, canaries)


async def test_with_keys_no_plaintext_at_rest_and_everything_still_reads(
    sealed: Agent, workspace: Path, dev_server: EmbeddedServer
) -> None:
    canaries = Canaries.new()
    run = await canary_run(sealed, workspace, canaries)
    assert found_in(dev_server.data_dir, canaries) == set()
    assert sealed.settings.blob_dir.is_dir()
    assert found_in(sealed.settings.blob_dir, canaries) == set()
    # the transcript reads through the keys
    observations = [c.observation or "" for c in run.steps[0].tool_calls]
    assert canaries.output in observations[0] and canaries.blob in observations[1]
    # the audit: histories decrypted, every blob verified
    histories = [
        await decrypt_history(h, sealed.temporal.data_converter)
        for h in await load_histories(sealed.temporal, run.run_id)
    ]
    records, issues = build_trail([decode_history(h) for h in histories], run.client.content())
    assert issues == []
    assert canaries.output in str(records)
    # replay: the current code reproduces the encrypted history
    replayer = Replayer(
        workflows=[AgentWorkflow], data_converter=data_converter(keyring_for(sealed.settings))
    )
    for history in await load_histories(sealed.temporal, run.run_id):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None


async def test_a_missing_or_wrong_key_is_an_error_not_garbage(
    sealed: Agent, workspace: Path, settings: Settings
) -> None:
    run = await canary_run(sealed, workspace, Canaries.new())
    settings = settings.model_copy(update={"namespace": sealed.settings.namespace})
    no_keys: Client = await connect_temporal(settings)
    with pytest.raises(CodecError) as exc:
        await no_keys.get_workflow_handle(run.run_id).result()
    assert str(exc.value) == (
        "a payload is encrypted (key id 'k1') and no key is configured: set "
        "CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE"
    )
    wrong = await connect_temporal(
        settings.model_copy(update={"codec_keys": SecretStr(new_key("k1"))})
    )
    with pytest.raises(CodecError, match="does not decrypt with key id 'k1'"):
        await wrong.get_workflow_handle(run.run_id).result()
    assert sealed.settings.codec_keys is not None
    old = sealed.settings.codec_keys.get_secret_value()
    rotated = await connect_temporal(  # a new current key, the old one still listed
        settings.model_copy(update={"codec_keys": SecretStr(f"{new_key('k2')},{old}")})
    )
    result = await rotated.get_workflow_handle(run.run_id, result_type=RunResult).result()
    assert result.output == "done"


async def test_the_audit_command_with_keys(
    sealed: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await canary_run(sealed, workspace, Canaries.new())
    keys = sealed.settings.codec_keys
    assert keys is not None
    monkeypatch.setenv("CAPSTAN_CODEC_KEYS", keys.get_secret_value())  # run_cli passes it on
    monkeypatch.setenv("TEMPORAL_NAMESPACE", sealed.settings.namespace)
    out = await asyncio.to_thread(run_cli, sealed.settings, "audit", run.run_id, "--verify")
    replay = await asyncio.to_thread(run_cli, sealed.settings, "replay", run.run_id)
    assert out.returncode == 0 and out.stdout.strip().endswith("verified"), out
    assert replay.returncode == 0, replay
