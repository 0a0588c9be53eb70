"""Which blob store a process uses, decided in one place for workers and clients alike.

Workers write the blobs a run refers to; clients (the CLI, `capstan serve`, the Python client)
on other machines read them. Both call `blob_store_for(settings)`, so the same settings resolve
the same refs to the same bytes:

- `CAPSTAN_BLOB_URL` unset: the local directory `<data dir>/blobs` (one machine).
- `CAPSTAN_BLOB_URL=s3://bucket/prefix`: the shared S3-compatible store, behind a read-through
  cache in `<data dir>/blob-cache` bounded by `CAPSTAN_BLOB_CACHE_BYTES` (0 turns it off).
- `CAPSTAN_BLOB_URL=file:///path` or a plain path: a local directory elsewhere (a network
  filesystem shared by every machine).

With codec keys configured (`CAPSTAN_CODEC_KEYS` / `CAPSTAN_CODEC_KEY_FILE`) every store seals
what it writes and opens what it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capstan.runtime.blob_cache import CachedBlobStore
from capstan.runtime.blobstore import BlobStore, BlobStoreError, ContentStore, LocalBlobStore
from capstan.runtime.codec import Keyring, load_keyring
from capstan.runtime.config import Settings
from capstan.runtime.environment import ConfigError
from capstan.runtime.s3 import S3BlobStore

__all__ = ["blob_store_for", "check_blob_store", "content_store_for", "keyring_for"]


def keyring_for(settings: Settings) -> Keyring | None:
    """The codec keys of these settings (None: no encryption); a bad key is a `ConfigError`."""
    keys = settings.codec_keys.get_secret_value() if settings.codec_keys else None
    return load_keyring(keys, settings.codec_key_file)


def blob_store_for(settings: Settings) -> BlobStore:
    """The blob store these settings name (see the module docstring)."""
    url = settings.blob_url
    keyring = keyring_for(settings)
    if not url:
        return LocalBlobStore(settings.blob_dir, keyring)
    if url.startswith("s3://"):
        remote = S3BlobStore(url, settings.s3, keyring)
        cache = settings.data_dir / "blob-cache" / remote.bucket
        return CachedBlobStore(remote, cache, settings.blob_cache_bytes, keyring)
    if "://" in url and not url.startswith("file://"):
        raise ConfigError(f"CAPSTAN_BLOB_URL={url}: use s3://BUCKET/PREFIX or a directory")
    # a directory named here may be shared over the network: its calls stay off the loop
    return LocalBlobStore(Path(url.removeprefix("file://")), keyring, on_local_disk=False)


def content_store_for(
    settings: Settings, count_tokens: Callable[[str], int] | None = None
) -> ContentStore:
    return ContentStore(blob_store_for(settings), count_tokens=count_tokens)


def check_blob_store(store: BlobStore, settings: Settings) -> None:
    """Reach a remote store now; a store that cannot be used is one `ConfigError` line."""
    check = getattr(store, "check", None)
    if not callable(check):
        return
    try:
        check()
    except BlobStoreError as exc:
        raise ConfigError(str(exc)) from exc
