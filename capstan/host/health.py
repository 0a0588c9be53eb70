"""The worker's health endpoint: `/healthz` (alive) and `/readyz` (ready to take work).

An orchestrator asks two different questions. Liveness: does the process's event loop still
answer? `/healthz` is served by that loop, so any answer is the answer. Readiness: should work
be sent here? `/readyz` runs the worker's checks (polling, Temporal answering, the blob store
reachable) and is 503 while any fails — and from the moment SIGTERM arrives, so a draining
worker is taken out of rotation before its pollers stop.

A tiny Starlette app on uvicorn in the worker's own event loop (both already dependencies of
`capstan serve`), on `CAPSTAN_HEALTH_PORT`; off when that is unset. It never reads or changes
run state, and it never installs signal handlers: SIGTERM belongs to the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel
from temporalio.client import Client

from capstan.host.probe import LIVE_PATH, READY_PATH
from capstan.runtime.blobstore import BlobStore
from capstan.runtime.environment import ConfigError

if TYPE_CHECKING:  # the web stack is imported only by a worker that serves the probes
    import uvicorn
    from starlette.applications import Starlette

__all__ = [
    "LIVE_PATH",
    "READY_PATH",
    "Health",
    "Readiness",
    "blob_check",
    "health_app",
    "quiet_server",
    "serve_health",
    "temporal_check",
]

#: A readiness check: returns when healthy, raises with a one-line reason otherwise.
Check = Callable[[], Awaitable[None]]


class Readiness(BaseModel):
    """The body of `/readyz`: each check's name -> `ok` or what is wrong."""

    ready: bool
    checks: dict[str, str]


class Health:
    """What the probes read. The worker adds its checks once it polls and sets `draining` on
    SIGTERM; until the first checks are added the process is alive but not ready."""

    def __init__(self, timeout: float = 3.0) -> None:
        self.timeout = timeout
        self.draining = False
        self._checks: dict[str, Check] = {}

    def watch(self, checks: Mapping[str, Check]) -> None:
        self._checks.update(checks)

    async def readiness(self) -> Readiness:
        if self.draining:
            return Readiness(ready=False, checks={"worker": "draining"})
        if not self._checks:
            return Readiness(ready=False, checks={"worker": "starting"})
        names = list(self._checks)
        results = await asyncio.gather(*(self._run(self._checks[n]) for n in names))
        checks = dict(zip(names, results, strict=True))
        return Readiness(ready=all(r == "ok" for r in results), checks=checks)

    async def _run(self, check: Check) -> str:
        try:
            await asyncio.wait_for(check(), self.timeout)
        except TimeoutError:
            return f"no answer within {self.timeout:g}s"
        except Exception as exc:
            return (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        return "ok"


def temporal_check(client: Client) -> Check:
    """Temporal's frontend answers its gRPC health check on this worker's connection."""

    async def check() -> None:
        if not await client.service_client.check_health(timeout=timedelta(seconds=2)):
            raise RuntimeError("Temporal's frontend reports it is not serving")

    return check


def blob_check(store: BlobStore) -> Check:
    """The blob store can be reached with these credentials (a remote store's `check`; a local
    directory has nothing to reach)."""
    probe = getattr(store, "check", None)

    async def check() -> None:
        if callable(probe):
            await asyncio.to_thread(probe)

    return check


def health_app(health: Health) -> Starlette:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def live(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> JSONResponse:
        state = await health.readiness()
        return JSONResponse(state.model_dump(), status_code=200 if state.ready else 503)

    return Starlette(routes=[Route(LIVE_PATH, live), Route(READY_PATH, ready)])


def quiet_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn without its signal handlers, for a server inside a process that owns them (the
    worker drains on SIGTERM; a test runner keeps its own)."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)


@contextlib.asynccontextmanager
async def serve_health(health: Health, host: str, port: int | None) -> AsyncIterator[None]:
    """Serve the probes for the duration (nothing when `port` is None). A port that cannot be
    bound is a `ConfigError` before anything else starts."""
    if port is None:
        yield
        return
    import uvicorn

    sock = _listen(host, port)
    config = uvicorn.Config(
        health_app(health), lifespan="off", log_level="warning", access_log=False
    )
    server = quiet_server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield
    finally:
        server.should_exit = True
        await task
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"CAPSTAN_HEALTH_PORT={port}: cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
