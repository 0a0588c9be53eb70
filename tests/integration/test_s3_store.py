"""The S3 blob store against a real S3-compatible server (moto's standalone server, over HTTP),
through the production client path: `blob_store_for(settings)` -> boto3 -> the wire.

Covers what a shared store must never get wrong: every read verified, encrypted at rest with a
keyring, transient failures retried, and each permanent failure (no object, no bucket, wrong
credentials, nothing listening) one clear line of the right `BlobError` type.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from pydantic import SecretStr

from capstan.runtime.blob_cache import CachedBlobStore
from capstan.runtime.blobs import blob_store_for, check_blob_store
from capstan.runtime.blobstore import (
    BlobAccessError,
    BlobIntegrityError,
    BlobKeyError,
    BlobNotFoundError,
    BlobStoreMissingError,
    BlobUnavailableError,
)
from capstan.runtime.config import ConfigError, Settings
from capstan.runtime.s3 import S3Access, S3BlobStore
from tests.conftest import S3Server, free_port, start_moto

KEY_A = ("a", b"A" * 32)
KEY_B = ("b", b"B" * 32)


def settings_for(server: S3Server, bucket: str, data_dir: Path, **kw: object) -> Settings:
    return Settings(data_dir=data_dir, blob_url=f"s3://{bucket}/runs", s3=server.access, **kw)  # type: ignore[arg-type]


def raw_object(server: S3Server, bucket: str, key: str) -> bytes:
    body = _boto(server).get_object(Bucket=bucket, Key=key)["Body"].read()
    assert isinstance(body, bytes)
    return body


def _boto(server: S3Server):  # type: ignore[no-untyped-def]
    secret = server.access.secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=server.access.access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret else None,
    )


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


def test_round_trip_layout_and_a_second_machine(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    writer = blob_store_for(settings_for(s3_server, s3_bucket, tmp_path / "worker"))
    data = b"conversation segment " * 100
    digest = writer.put(data)
    assert digest == hashlib.sha256(data).hexdigest()
    # the object sits where the local layout would put it, under the prefix
    assert raw_object(s3_server, s3_bucket, f"runs/{digest[:2]}/{digest[2:]}") == data
    # a client on another machine (its own data dir, its own cache) resolves the same ref
    reader = blob_store_for(settings_for(s3_server, s3_bucket, tmp_path / "laptop"))
    assert reader.get(digest) == data


def test_every_read_is_verified(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    store = blob_store_for(
        settings_for(s3_server, s3_bucket, tmp_path, blob_cache_bytes=0)
    )  # no cache: every read goes to S3
    digest = store.put(b"the true content")
    _boto(s3_server).put_object(
        Bucket=s3_bucket, Key=f"runs/{digest[:2]}/{digest[2:]}", Body=b"the fake content"
    )
    with pytest.raises(BlobIntegrityError) as exc:
        store.get(digest)
    assert one_line(exc) == f"blob {digest} was altered: its content no longer matches"


def test_a_missing_object_and_a_missing_bucket_are_named(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = blob_store_for(settings_for(s3_server, s3_bucket, tmp_path))
    absent = "0" * 64
    with pytest.raises(BlobNotFoundError) as exc:
        store.get(absent)
    assert one_line(exc) == f"blob {absent} is missing from s3://{s3_bucket}/runs"
    nowhere = settings_for(s3_server, "no-such-bucket-here", tmp_path)
    with pytest.raises(BlobStoreMissingError) as exc:
        blob_store_for(nowhere).get(absent)
    assert "bucket 'no-such-bucket-here' does not exist" in one_line(exc)
    with pytest.raises(ConfigError) as config_exc:  # what a worker says at start
        check_blob_store(blob_store_for(nowhere), nowhere)
    assert one_line(config_exc) == (
        f"blob store not found: bucket 'no-such-bucket-here' does not exist at "
        f"{s3_server.endpoint} (CAPSTAN_BLOB_URL=s3://no-such-bucket-here/runs)"
    )


@pytest.fixture(scope="module")
def strict_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A second S3 server that checks credentials (moto: IAM auth from the first request)."""
    server = start_moto(
        tmp_path_factory.mktemp("moto-auth") / "moto.log", {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    )
    try:
        yield server
    finally:
        server.process.terminate()
        server.process.wait(timeout=10)


def test_wrong_credentials_are_one_clear_line(strict_s3: S3Server, tmp_path: Path) -> None:
    wrong = strict_s3.access.model_copy(
        update={"access_key_id": "AKIAWRONG", "secret_access_key": SecretStr("nope")}
    )
    settings = Settings(data_dir=tmp_path, blob_url="s3://team-blobs/capstan", s3=wrong)
    store = blob_store_for(settings)
    with pytest.raises(BlobAccessError) as exc:
        store.put(b"x")
    message = one_line(exc)
    assert message.startswith(f"s3://team-blobs/capstan at {strict_s3.endpoint} refused the ")
    assert "AWS_ACCESS_KEY_ID" in message and "nope" not in message
    with pytest.raises(ConfigError, match="refused the credentials"):
        check_blob_store(store, settings)


def test_nothing_listening_is_unavailable_after_retries(tmp_path: Path) -> None:
    closed = S3Access(
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region="us-east-1",
        access_key_id="k",
        secret_access_key=SecretStr("s"),
    )
    store = S3BlobStore("s3://bucket/p", closed, max_attempts=2, timeout=2)
    with pytest.raises(BlobUnavailableError) as exc:
        store.get("1" * 64)
    assert one_line(exc).startswith(f"s3://bucket/p unreachable at {closed.endpoint_url} after 2")


class _Flaky(BaseHTTPRequestHandler):
    """Answers the first `failures` requests with 503 SlowDown, then forwards to `upstream`."""

    failures = 0
    seen: list[str]
    upstream = ""

    def _handle(self) -> None:
        self.seen.append(self.command)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if len(self.seen) <= self.failures:
            payload = b"<Error><Code>SlowDown</Code><Message>slow down</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=10)
        conn.request(self.command, self.path, body, dict(self.headers))
        response = conn.getresponse()
        content = response.read()
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in {"content-length", "transfer-encoding", "connection"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_PUT = do_HEAD = _handle

    def log_message(self, *args: object) -> None:
        pass


def test_transient_errors_are_retried(s3_server: S3Server, s3_bucket: str) -> None:
    handler = type("Flaky", (_Flaky,), {"failures": 2, "seen": [], "upstream": ""})
    handler.upstream = s3_server.endpoint.removeprefix("http://")
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        via_proxy = s3_server.access.model_copy(
            update={"endpoint_url": f"http://127.0.0.1:{proxy.server_port}"}
        )
        store = S3BlobStore(f"s3://{s3_bucket}/flaky", via_proxy, max_attempts=3)
        digest = store.put(b"survives two 503s")
        assert handler.seen == ["PUT", "PUT", "PUT"]
        assert store.get(digest) == b"survives two 503s"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_encrypted_at_rest_and_a_wrong_key_is_an_error(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    keys = f"{KEY_A[0]}:{base64.b64encode(KEY_A[1]).decode()}"
    sealed = settings_for(s3_server, s3_bucket, tmp_path / "w", codec_keys=SecretStr(keys))
    store = blob_store_for(sealed)
    canary = b"CANARY-7f3a tool output that must not be stored in the clear"
    digest = store.put(canary)
    stored = raw_object(s3_server, s3_bucket, f"runs/{digest[:2]}/{digest[2:]}")
    assert b"CANARY-7f3a" not in stored
    cached = list((tmp_path / "w" / "blob-cache").rglob("*"))
    assert not any(p.is_file() and b"CANARY-7f3a" in p.read_bytes() for p in cached)
    assert blob_store_for(sealed.model_copy(update={"data_dir": tmp_path / "r"})).get(digest) == (
        canary
    )
    no_keys = settings_for(s3_server, s3_bucket, tmp_path / "nokeys")
    with pytest.raises(BlobKeyError) as exc:
        blob_store_for(no_keys).get(digest)
    assert "is encrypted (key id 'a') and no key is configured" in one_line(exc)
    other = f"a:{base64.b64encode(KEY_B[1]).decode()}"
    wrong = no_keys.model_copy(update={"codec_keys": SecretStr(other)})
    with pytest.raises(BlobKeyError) as exc:
        blob_store_for(wrong).get(digest)
    assert "does not decrypt with key id 'a'" in one_line(exc)


def test_the_cache_reads_through_and_stays_within_its_bytes(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    limit = 40_000
    store = blob_store_for(settings_for(s3_server, s3_bucket, tmp_path, blob_cache_bytes=limit))
    assert isinstance(store, CachedBlobStore)
    remote = store.remote
    assert isinstance(remote, S3BlobStore)
    blobs = [bytes([i]) * 10_000 for i in range(12)]
    digests = [store.put(b) for b in blobs]
    assert store.cached_bytes <= limit
    # the newest blobs are served locally: gone from S3, still readable here
    remote.delete(digests[-1])
    assert store.get(digests[-1]) == blobs[-1]
    # an early one was evicted: read through from S3 and cached again
    assert store.get(digests[0]) == blobs[0]
    assert store.cached_bytes <= limit
    # a damaged cache copy is dropped and the remote copy wins
    path = tmp_path / "blob-cache" / s3_bucket / digests[0][:2] / digests[0][2:]
    path.write_bytes(b"garbage")
    assert store.get(digests[0]) == blobs[0]
    # another machine has no copy of the deleted blob: a clear error, not anything else
    fresh = blob_store_for(settings_for(s3_server, s3_bucket, tmp_path / "other"))
    with pytest.raises(BlobNotFoundError, match="is missing from s3://"):
        fresh.get(digests[-1])
