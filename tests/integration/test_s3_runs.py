"""Whole runs with the blob store on S3 (moto's standalone server): the worker writes through the
production path, a client on "another machine" (its own data dir) reads and audits the run, and
a store that fails under a run ends it by the error taxonomy with a line naming the blob."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import boto3
import pytest

from capstan.core.spec import TerminalReason
from capstan.runtime.config import ConfigError, Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from capstan.worker import run_worker
from tests.conftest import S3Server
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending

pytestmark = pytest.mark.server

BIG = "line of a large file\n" * 400  # over the inline limit: stored as a blob


def on_s3(agent: Agent, server: S3Server, bucket: str, **updates: object) -> Agent:
    return agent.configure(blob_url=f"s3://{bucket}/capstan", s3=server.access, **updates)


def s3_client(server: S3Server):  # type: ignore[no-untyped-def]
    """A plain boto3 client, for looking at and damaging the bucket from outside."""
    env = server.env()
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def objects(server: S3Server, bucket: str) -> list[str]:
    listing = s3_client(server).list_objects_v2(Bucket=bucket).get("Contents", [])
    return [str(o["Key"]) for o in listing]


def cli(
    settings: Settings, server: S3Server, data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`capstan ...` on another machine: same server, bucket and task queue, its own data dir."""
    extra = {**server.env(), "CAPSTAN_DATA_DIR": str(data_dir)}
    return run_cli(settings, *args, env={**extra, "CAPSTAN_BLOB_URL": settings.blob_url or ""})


async def test_a_run_on_s3_is_read_and_audited_from_another_machine(
    agent: Agent, workspace: Path, s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    (workspace / "big.txt").write_text(BIG)
    on_s3(agent, s3_server, s3_bucket)
    script = [say(call("read_file", path="big.txt")), say(call("finish", answer="read it"))]
    run = await agent.run(script, agent.spec(auto_approve=True))
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert BIG.strip() in (run.steps[0].tool_calls[0].observation or "")
    keys = objects(s3_server, s3_bucket)
    assert keys and all(k.startswith("capstan/") for k in keys)
    assert not agent.settings.blob_dir.exists()  # nothing went to the local store
    laptop = tmp_path / "laptop"
    out = await asyncio.to_thread(
        cli, agent.settings, s3_server, laptop, "audit", run.run_id, "--verify"
    )
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.strip().endswith("verified")
    transcript = await asyncio.to_thread(
        cli, agent.settings, s3_server, laptop, "transcript", run.run_id
    )
    assert transcript.returncode == 0, transcript.stderr
    assert "line of a large file" in transcript.stdout


async def test_a_blob_deleted_under_a_run_ends_it_with_the_blob_named(
    agent: Agent, workspace: Path, s3_server: S3Server, s3_bucket: str
) -> None:
    on_s3(agent, s3_server, s3_bucket, blob_cache_bytes=0)
    script = [
        say(call("write_file", path="a.txt", content="A"), content="x" * 3000),
        say(call("finish", answer="never")),
    ]
    with FakeProvider(script) as fake:
        async with agent.serving(fake) as live:
            run_id = await live.start(agent.spec())
            await wait_pending(live.client, run_id)  # parked on the approval
        keys = objects(s3_server, s3_bucket)
        assert keys
        store = s3_client(s3_server)
        for key in keys:
            store.delete_object(Bucket=s3_bucket, Key=key)
        async with agent.serving(fake) as live:  # a fresh worker: nothing in memory
            await live.client.decide(run_id, "approve")
            result = await asyncio.wait_for(live.client.result(run_id), 60)
    assert result.terminal_reason is TerminalReason.MODEL_ERROR
    assert result.error is not None
    assert f"is missing from s3://{s3_bucket}/capstan" in result.error


async def test_a_worker_with_a_missing_bucket_stops_at_start(
    settings: Settings, s3_server: S3Server
) -> None:
    broken = settings.model_copy(
        update={"blob_url": "s3://no-such-bucket-anywhere/x", "s3": s3_server.access}
    )
    with pytest.raises(ConfigError) as exc:
        await run_worker(broken)
    assert str(exc.value) == (
        f"blob store not found: bucket 'no-such-bucket-anywhere' does not exist at "
        f"{s3_server.endpoint} (CAPSTAN_BLOB_URL=s3://no-such-bucket-anywhere/x)"
    )
