"""The worker's health endpoint on a real socket, and the probe a container runs against it."""

from __future__ import annotations

import asyncio
import socket

import pytest

from capstan.host.health import Health, blob_check, serve_health
from capstan.host.probe import LIVE_PATH, PORT_VARIABLE, READY_PATH, main, probe
from capstan.runtime.config import Settings
from capstan.runtime.environment import ConfigError, variables_of
from tests.conftest import free_port


async def ok() -> None:
    return None


async def broken() -> None:
    raise RuntimeError("bucket gone\nsecond line")


async def hangs() -> None:
    await asyncio.sleep(30)


async def test_readiness_follows_the_checks_and_draining() -> None:
    health = Health(timeout=0.2)
    assert (await health.readiness()).checks == {"worker": "starting"}
    health.watch({"worker": ok, "temporal": ok})
    assert (await health.readiness()).ready
    health.watch({"blobs": broken, "temporal": hangs})
    state = await health.readiness()
    assert not state.ready
    assert state.checks == {
        "worker": "ok",
        "temporal": "no answer within 0.2s",
        "blobs": "bucket gone",
    }
    health.draining = True
    assert (await health.readiness()).checks == {"worker": "draining"}


async def test_blob_check_uses_the_store_check_when_there_is_one() -> None:
    class Remote:
        def check(self) -> None:
            raise RuntimeError("no such bucket")

    class Local:
        pass

    await blob_check(Local())()  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no such bucket"):
        await blob_check(Remote())()  # type: ignore[arg-type]


async def test_the_endpoints_answer_on_a_real_port(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    health = Health()
    async with serve_health(health, "127.0.0.1", port):
        assert await asyncio.to_thread(probe, port, LIVE_PATH) == (True, '{"status":"ok"}')
        healthy, line = await asyncio.to_thread(probe, port, READY_PATH)
        assert not healthy and line.endswith('503 {"ready":false,"checks":{"worker":"starting"}}')
        health.watch({"worker": ok})
        assert (await asyncio.to_thread(probe, port))[0]
        monkeypatch.setenv(PORT_VARIABLE, str(port))
        assert await asyncio.to_thread(main, []) == 0
        health.draining = True
        assert await asyncio.to_thread(main, []) == 1
        assert await asyncio.to_thread(main, ["--live"]) == 0  # draining, still alive
    healthy, line = await asyncio.to_thread(probe, port, LIVE_PATH, 1.0)
    assert not healthy and "Connection refused" in line


async def test_a_taken_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"^CAPSTAN_HEALTH_PORT={port}: cannot listen"):
            async with serve_health(Health(), "127.0.0.1", port):
                pass


def test_the_probe_reads_the_variable_the_worker_reads() -> None:
    assert variables_of(Settings)["health_port"] == PORT_VARIABLE
    assert Settings.from_env({PORT_VARIABLE: "8000"}).health_port == 8000
    assert Settings.from_env({}).health_port is None  # off by default
