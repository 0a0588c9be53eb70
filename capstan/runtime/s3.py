"""The shared blob store: S3 or anything that speaks its protocol (MinIO, R2, Ceph, moto).

`CAPSTAN_BLOB_URL=s3://bucket/prefix`; the endpoint, region and credentials come from the
standard AWS variables (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_REGION` or
`AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), and
with no keys set, from boto3's own chain (`AWS_PROFILE`, web identity on Kubernetes, instance
and container roles). Objects are `<prefix>/<aa>/<rest of the sha256>`, the same layout as the
local store, so `aws s3 sync .capstan/blobs s3://bucket/prefix` moves a machine's blobs over.

Why boto3 in a thread: the `BlobStore` protocol is synchronous (activities already call it via
`asyncio.to_thread`, off the event loop), boto3 clients are thread-safe, and botocore brings the
whole AWS credential chain and a tested retry policy. Temporal's own S3 storage driver uses
aioboto3, which is botocore underneath: same variables, same error codes, so moving this store
to async later changes no configuration. obstore was the alternative (smaller, Rust); botocore
won on the credential chain and on error codes we can map one by one.

Retries: botocore's `standard` mode retries throttling, 5xx and connection errors with
exponential backoff and jitter; a body cut mid-read is retried here. What still fails becomes
one `BlobError` line: `BlobNotFoundError` (no such object), `BlobStoreMissingError` (no such
bucket), `BlobAccessError` (credentials), `BlobUnavailableError` (unreachable after retries).
Every read is verified (and decrypted with a keyring) by `unseal_verified`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

from pydantic import BaseModel, ConfigDict, SecretStr

from capstan.runtime.blobstore import (
    BlobAccessError,
    BlobError,
    BlobNotFoundError,
    BlobStoreMissingError,
    BlobUnavailableError,
    check_digest,
    seal,
    unseal_verified,
)
from capstan.runtime.codec import Keyring
from capstan.runtime.environment import ConfigError

if TYPE_CHECKING:
    from types_boto3_s3.client import S3Client

__all__ = ["S3Access", "S3BlobStore", "parse_s3_url"]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_MISSING_OBJECT = {"NoSuchKey", "404", "NotFound"}
_REFUSED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "403",
}
_BODY_ATTEMPTS = 3


class S3Access(BaseModel):
    """Where the S3 endpoint is and who we are; unset fields fall back to boto3's chain."""

    model_config = ConfigDict(frozen=True)

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> S3Access:
        def first(*names: str) -> str | None:
            return next((env[n] for n in names if env.get(n)), None)

        secret, token = first("AWS_SECRET_ACCESS_KEY"), first("AWS_SESSION_TOKEN")
        return cls(
            endpoint_url=first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region=first("AWS_REGION", "AWS_DEFAULT_REGION"),
            access_key_id=first("AWS_ACCESS_KEY_ID"),
            secret_access_key=SecretStr(secret) if secret else None,
            session_token=SecretStr(token) if token else None,
        )


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> `("bucket", "some/prefix")`; `ConfigError` otherwise."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not url.startswith("s3://") or not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(
            f"CAPSTAN_BLOB_URL={url}: not s3://BUCKET/PREFIX with a valid bucket name "
            "(3-63 lowercase letters, digits, '.' or '-')"
        )
    return bucket, prefix.strip("/")


@functools.lru_cache(maxsize=8)
def _client(access: S3Access, max_attempts: int, timeout: float) -> S3Client:
    """One boto3 client per configuration and process (clients are thread-safe; making one
    costs ~100 ms)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError(
            "CAPSTAN_BLOB_URL=s3://...: the S3 store needs boto3: pip install 'capstan[s3]'"
        ) from None
    session = boto3.session.Session(
        aws_access_key_id=access.access_key_id,
        aws_secret_access_key=_reveal(access.secret_access_key),
        aws_session_token=_reveal(access.session_token),
        region_name=access.region or ("us-east-1" if access.endpoint_url else None),
    )
    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        connect_timeout=timeout,
        read_timeout=timeout,
        max_pool_connections=16,
        # we verify sha256 ourselves; newer checksum headers trip some S3-compatible stores
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        # a custom endpoint (MinIO, moto, an IP address) rarely serves bucket subdomains
        s3={"addressing_style": "path" if access.endpoint_url else "auto"},
    )
    return session.client("s3", endpoint_url=access.endpoint_url, config=config)


def _reveal(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


class S3BlobStore:
    """Blobs as objects in one bucket under one prefix; see the module docstring."""

    on_local_disk = False

    def __init__(
        self,
        url: str,
        access: S3Access | None = None,
        keyring: Keyring | None = None,
        *,
        max_attempts: int = 5,
        timeout: float = 20.0,
    ) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.access = access or S3Access()
        self.keyring = keyring
        self.max_attempts = max_attempts
        self._client = _client(self.access, max_attempts, timeout)

    def key(self, sha256: str) -> str:
        check_digest(sha256)
        return f"{self.prefix}/{sha256[:2]}/{sha256[2:]}".lstrip("/")

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        try:
            self._client.put_object(
                Bucket=self.bucket,
                Key=self.key(digest),
                Body=seal(data, digest, self.keyring),
                ContentType="application/octet-stream",
            )
        except Exception as exc:
            self._raise(exc, digest)
        return digest

    def get(self, sha256: str) -> bytes:
        key = self.key(sha256)
        for attempt in range(1, _BODY_ATTEMPTS + 1):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key)
                stored = response["Body"].read()
                break
            except Exception as exc:
                if attempt == _BODY_ATTEMPTS or not _body_cut(exc):
                    self._raise(exc, sha256)
        return unseal_verified(stored, sha256, self.keyring, self.where)

    def check(self) -> None:
        """Reach the bucket with these credentials now, so a worker that cannot use the
        store says so at start instead of at its first blob."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            self._raise(exc, None)

    def delete(self, sha256: str) -> None:
        """Remove one blob (tests and retention tooling; runs never delete)."""
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.key(sha256))
        except Exception as exc:
            self._raise(exc, sha256)

    def _raise(self, exc: Exception, sha256: str | None) -> NoReturn:
        raise _translate(exc, self, sha256) from exc


def _body_cut(exc: Exception) -> bool:
    from botocore.exceptions import (
        ConnectionClosedError,
        IncompleteReadError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    return isinstance(
        exc, IncompleteReadError | ResponseStreamingError | ReadTimeoutError | ConnectionClosedError
    )


def _translate(exc: Exception, store: S3BlobStore, sha256: str | None) -> BlobError:
    """One `BlobError` line for a botocore failure (see the module docstring)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    if isinstance(exc, BlobError):
        return exc
    where = store.where
    endpoint = store.access.endpoint_url or "AWS"
    if isinstance(exc, NoCredentialsError):
        return BlobAccessError(
            f"no credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE, or give the worker a role)"
        )
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if code == "NoSuchBucket" or (sha256 is None and status == 404):
            return BlobStoreMissingError(
                f"blob store not found: bucket {store.bucket!r} does not exist at {endpoint} "
                f"(CAPSTAN_BLOB_URL={where})"
            )
        if code in _MISSING_OBJECT and sha256 is not None:
            return BlobNotFoundError(f"blob {sha256} is missing from {where}")
        if code in _REFUSED or status == 403:
            return BlobAccessError(
                f"{where} at {endpoint} refused the credentials ({code or status}): check "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's policy"
            )
        if status >= 500 or code in {"SlowDown", "RequestTimeout", "ServiceUnavailable"}:
            return BlobUnavailableError(
                f"{where} at {endpoint} kept failing ({code or status}) after "
                f"{store.max_attempts} attempts"
            )
        return BlobError(f"{where} at {endpoint}: {code or status}: {error.get('Message', '')}")
    if isinstance(exc, BotoCoreError):
        detail = str(exc).replace("\n", " ")
        return BlobUnavailableError(
            f"{where} unreachable at {endpoint} after {store.max_attempts} attempts ({detail})"
        )
    return BlobError(f"{where}: {type(exc).__name__}: {exc}".replace("\n", " "))
