"""A codec server: Temporal's HTTP protocol for letting the Web UI (or `temporal` CLI) show
encrypted payloads decrypted, without ever giving those tools a key.

    POST <endpoint>/decode   {"payloads": [<Payload as proto3 JSON>, ...]}  -> same shape
    POST <endpoint>/encode   (the UI encodes what a person types, e.g. a signal's input)

The browser calls it directly, so it answers CORS preflights for the Web UI's origins only
(`--ui-origin`); a request from any other origin is refused. With a token
(`CAPSTAN_CODEC_SERVER_TOKEN`) every request must carry `Authorization: Bearer <token>` — the
Web UI sends one when told to pass its access token. Without a token the server only binds a
loopback address: anyone who can reach it can read every payload.

Decrypted payloads are what the run saw: blob refs appear as their `preview` (the first lines of
the content) with size and token count, so a reviewer in the Web UI reads what the agent read.
A payload no configured key opens is an error (400, one line), never ciphertext shown as text.

Edge module: the standard library's threaded HTTP server; the keyring is the process's own.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payloads

from capstan.runtime.codec import CodecError, Keyring, PayloadCipher
from capstan.runtime.environment import ConfigError

__all__ = ["DEFAULT_UI_ORIGINS", "CodecServer"]

DEFAULT_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY = 64 * 1024 * 1024
_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


class CodecServer:
    """Serve `/encode` and `/decode` for `keyring` on `host:port` (port 0: any free one)."""

    def __init__(
        self,
        keyring: Keyring,
        host: str = "127.0.0.1",
        port: int = 8081,
        origins: Sequence[str] = DEFAULT_UI_ORIGINS,
        token: SecretStr | None = None,
    ) -> None:
        if token is None and not _loopback(host):
            raise ConfigError(
                f"codec server on {host}: set CAPSTAN_CODEC_SERVER_TOKEN to serve beyond "
                "loopback (it decrypts every payload for whoever can reach it)"
            )
        handler = type(
            "Handler",
            (_Handler,),
            {
                "cipher": PayloadCipher(keyring),
                "origins": frozenset(o.rstrip("/") for o in origins),
                "token": token.get_secret_value() if token else None,
            },
        )
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> CodecServer:
        """Serve from a background thread (tests, embedding); `stop()` ends it."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    cipher: PayloadCipher
    origins: frozenset[str]
    token: str | None
    server_version = "capstan-codec"

    def do_OPTIONS(self) -> None:
        if not self._origin_allowed():
            self._reply(403, {"error": "origin not allowed"})
            return
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", _ALLOWED_HEADERS)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if not self._origin_allowed():
            self._reply(403, {"error": "origin not allowed"})
        elif not self._authorized():
            self._reply(401, {"error": "missing or wrong bearer token"})
        elif not path.endswith(("/encode", "/decode")):
            self._reply(404, {"error": "POST /encode or /decode"})
        else:
            self._convert(encode=path.endswith("/encode"))

    def _convert(self, encode: bool) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, {"error": f"body over {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            payloads = json_format.ParseDict(body, Payloads(), ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError) as exc:
            self._reply(400, {"error": f"not a JSON {{'payloads': [...]}} body: {exc}"})
            return
        convert = self._encode_one if encode else self.cipher.decrypt
        try:
            out = Payloads(payloads=[convert(p) for p in payloads.payloads])
        except CodecError as exc:
            self._reply(400, {"error": str(exc)})
            return
        self._reply(200, json_format.MessageToDict(out))

    def _encode_one(self, payload: Any) -> Any:
        return self.cipher.encrypt(payload) if self.cipher.keyring is not None else payload

    def _origin_allowed(self) -> bool:
        origin = self.headers.get("Origin")
        return origin is None or origin.rstrip("/") in self.origins

    def _authorized(self) -> bool:
        if self.token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    def _cors(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        if status != 403:
            self._cors()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # payload contents never reach a log; errors are in the responses
