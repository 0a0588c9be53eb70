"""`capstan codec-server` over a real socket: Temporal's /encode and /decode JSON protocol, CORS
for the Web UI's origin only, the bearer token, and a wrong key as a 400 with one line."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload, Payloads

from capstan.runtime.codec import ENCODING, PayloadCipher, load_keyring
from capstan.runtime.codec_server import CodecServer
from capstan.runtime.config import ConfigError
from tests.conftest import free_port
from tests.integration.helpers import ROOT

KEYS = f"k1:{base64.b64encode(b'k' * 32).decode()}"
UI = "http://localhost:8233"


def keyring():  # type: ignore[no-untyped-def]
    ring = load_keyring(KEYS, None)
    assert ring is not None
    return ring


def body(*payloads: Payload) -> dict[str, object]:
    """The JSON the Web UI posts: proto3 JSON, metadata values and data in base64."""
    return json_format.MessageToDict(Payloads(payloads=list(payloads)))


def parsed(response: httpx.Response) -> list[Payload]:
    return list(json_format.ParseDict(response.json(), Payloads()).payloads)


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


@pytest.fixture
def server() -> Iterator[CodecServer]:
    running = CodecServer(keyring(), port=0, token=SecretStr("t0ken")).start()
    yield running
    running.stop()


def test_decode_encode_and_cors_for_the_ui(server: CodecServer) -> None:
    sealed = PayloadCipher(keyring()).encrypt(plain("what the agent saw"))
    auth = {"Authorization": "Bearer t0ken", "Origin": UI, "X-Namespace": "default"}
    response = httpx.post(f"{server.url}/decode", json=body(sealed, plain("as is")), headers=auth)
    assert response.status_code == 200
    assert parsed(response) == [plain("what the agent saw"), plain("as is")]
    assert response.headers["access-control-allow-origin"] == UI
    encoded = httpx.post(f"{server.url}/encode", json=body(plain("typed in the UI")), headers=auth)
    (again,) = parsed(encoded)
    assert again.metadata["encoding"] == ENCODING and b"typed" not in again.data
    preflight = httpx.options(
        f"{server.url}/decode",
        headers={"Origin": UI, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    assert preflight.headers["access-control-allow-origin"] == UI


def test_other_origins_missing_tokens_and_wrong_keys_are_refused(server: CodecServer) -> None:
    sealed = PayloadCipher(keyring()).encrypt(plain("secret"))
    evil = httpx.post(
        f"{server.url}/decode",
        json=body(sealed),
        headers={"Origin": "https://evil.example", "Authorization": "Bearer t0ken"},
    )
    assert evil.status_code == 403 and "access-control-allow-origin" not in evil.headers
    assert (
        httpx.options(
            f"{server.url}/decode", headers={"Origin": "https://evil.example"}
        ).status_code
        == 403
    )
    for token in ("", "Bearer wrong"):
        response = httpx.post(
            f"{server.url}/decode", json=body(sealed), headers={"Authorization": token}
        )
        assert response.status_code == 401 and b"secret" not in response.content
    other = load_keyring(f"k1:{base64.b64encode(b'x' * 32).decode()}", None)
    assert other is not None
    wrong = CodecServer(other, port=0).start()
    try:
        response = httpx.post(f"{wrong.url}/decode", json=body(sealed))
    finally:
        wrong.stop()
    assert response.status_code == 400
    assert "does not decrypt with key id 'k1'" in response.json()["error"]


def test_beyond_loopback_a_token_is_required() -> None:
    with pytest.raises(ConfigError, match="set CAPSTAN_CODEC_SERVER_TOKEN"):
        CodecServer(keyring(), host="0.0.0.0", port=0)


def test_the_command() -> None:
    port = free_port()
    env = {**os.environ, "CAPSTAN_CODEC_KEYS": KEYS, "CAPSTAN_CODEC_SERVER_TOKEN": "t0ken"}
    process = subprocess.Popen(
        [sys.executable, "-m", "capstan", "codec-server", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == f"codec server at http://127.0.0.1:{port} (keys: k1)"
        sealed = PayloadCipher(keyring()).encrypt(plain("via the command"))
        response = httpx.post(
            f"http://127.0.0.1:{port}/decode",
            json=body(sealed),
            headers={"Authorization": "Bearer t0ken"},
        )
        assert parsed(response) == [plain("via the command")]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
