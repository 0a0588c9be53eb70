"""`capstan server --ui-codec-endpoint URL`: the embedded Web UI decodes payloads through a codec
server. The UI's browser code reads where from the UI server's settings, so that is checked."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_server_ui import _first_lines, _server

pytestmark = [pytest.mark.server, pytest.mark.slow]


def ui_settings(base: str, timeout: float = 30.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = httpx.get(f"{base}/api/v1/settings", timeout=5)
            answer.raise_for_status()
            settings: dict[str, object] = answer.json()
            return settings
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8088/codec", None])
def test_the_ui_reports_the_codec_endpoint(tmp_path: Path, endpoint: str | None) -> None:
    flags = ["--ui-codec-endpoint", endpoint] if endpoint else []
    proc, env = _server(tmp_path, *flags)
    try:
        _first_lines(proc, 2)  # listening, and the UI's address
        ui = f"http://127.0.0.1:{int(env['CAPSTAN_TEMPORAL_PORT']) + 1000}"
        codec = ui_settings(ui)["Codec"]
        assert isinstance(codec, dict)
        assert codec["Endpoint"] == (endpoint or "")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
