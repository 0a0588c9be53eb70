"""A real TLS endpoint in front of the session's dev server, for connection tests.

`temporal server start-dev` has no TLS flags, so the test terminates TLS itself: a throwaway CA
and server (and client) certificates made with the `openssl` CLI, and an asyncio proxy that
accepts TLS (optionally requiring a client certificate, i.e. mTLS) and forwards the plaintext
gRPC stream to the dev server. The client side is the production path: `temporalio.envconfig`
-> `connect_temporal` -> rustls in the Temporal core.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Certificates", "make_certificates", "tls_proxy"]


@dataclass(frozen=True)
class Certificates:
    """PEM files: a CA, a server certificate for localhost/127.0.0.1 signed by it, a client
    certificate signed by it, and an unrelated CA (the wrong one)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN=capstan {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def _leaf(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}{s}" for s in (".pem", ".key", ".csr"))
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", key, "-out", csr, "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", ext,
    )  # fmt: skip
    return cert, key


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    wrong_ca, _ = _ca(directory, "wrong-ca")
    server = _leaf(
        directory,
        "localhost",
        ca,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    client = _leaf(
        directory,
        "worker",
        ca,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n",
    )
    return Certificates(ca[0], server[0], server[1], client[0], client[1], wrong_ca)


def _server_context(certs: Certificates, require_client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    context.set_alpn_protocols(["h2"])  # gRPC over TLS negotiates HTTP/2 by ALPN
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs.ca)
    return context


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()  # one side ended: end the other at once (a test proxy)


@contextlib.asynccontextmanager
async def tls_proxy(
    upstream: str, certs: Certificates, *, require_client_cert: bool = False
) -> AsyncIterator[str]:
    """Listen with TLS on 127.0.0.1:<free port>, forward to `upstream` (host:port) in plaintext,
    and yield the listening address."""
    host, _, port = upstream.rpartition(":")
    tasks: set[asyncio.Task[None]] = set()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        writers = [client_w]
        try:
            server_r, server_w = await asyncio.open_connection(host, int(port))
            writers.append(server_w)
            await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))
        except OSError:
            pass
        finally:  # also when cancelled at shutdown: no transport is left open
            for writer in writers:
                writer.transport.abort()

    def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(handle(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(
        track, "127.0.0.1", 0, ssl=_server_context(certs, require_client_cert)
    )
    address = server.sockets[0].getsockname()
    try:
        yield f"{address[0]}:{address[1]}"
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
