"""`capstan server` serves the Temporal Web UI by default (on 127.0.0.1) and links runs to it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _server(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update(CAPSTAN_DATA_DIR=str(tmp_path / "data"), CAPSTAN_TEMPORAL_PORT=str(free_port()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "capstan", "server", *flags],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, env


def _first_lines(proc: subprocess.Popen[str], n: int) -> list[str]:
    assert proc.stdout is not None
    return [proc.stdout.readline().strip() for _ in range(n)]


def test_the_web_ui_is_served_and_runs_link_to_it(tmp_path: Path) -> None:
    proc, env = _server(tmp_path)  # the UI on its default port: the gRPC port + 1000
    ui_port = int(env["CAPSTAN_TEMPORAL_PORT"]) + 1000
    try:
        lines = _first_lines(proc, 2)
        url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows"
        assert lines[1] == f"Temporal Web UI: {url}", lines
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        run = subprocess.run(
            [sys.executable, "-m", "capstan", "run", "linked", "--id", "ui-run"],
            env={**env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert f"web UI: {url}/ui-run" in run.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_no_ui_and_a_taken_ui_port_are_clear(tmp_path: Path) -> None:
    proc, _ = _server(tmp_path, "--no-ui")
    try:
        (line,) = _first_lines(proc, 1)
        assert line.startswith("Temporal dev server listening on")
        time.sleep(0.5)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    with socket_on_port() as port:
        proc, _ = _server(tmp_path, "--ui-port", str(port))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2
        assert err.strip() == (
            f"capstan: the Web UI port {port} on 127.0.0.1 is in use; choose another with "
            "--ui-port or turn the UI off with --no-ui"
        )


class socket_on_port:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
