"""The content-addressed blob store: large content is written once and referenced by sha256.

Activities write blobs; the client reads them to resolve transcripts and audits. Every read
verifies the hash, so a missing or altered blob is an error, never silently wrong content.
`LocalBlobStore` is the embedded default; `S3BlobStore` (`capstan.runtime.s3`) is the shared
one, behind a bounded local read-through cache (`capstan.runtime.blob_cache`); the factory
`capstan.runtime.blobs.blob_store_for(settings)` picks one, for workers and clients alike.

A blob is named by the sha256 of its plaintext. With a keyring (`capstan.runtime.codec`) the
stored bytes are an AES-GCM envelope bound to that name; reading decrypts, then verifies the
hash. Blobs written before encryption was turned on stay readable (their bytes hash to their
name), and a sealed blob read without its key is a `BlobKeyError`, never ciphertext.

This is an edge module (file IO); the pure core only ever sees `BlobRef`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from capstan.core.content import INLINE_LIMIT_BYTES, BlobRef, Text, preview_of
from capstan.core.errors import StoreError
from capstan.runtime.codec import CodecError, Keyring, blob_key_id, is_sealed_blob

__all__ = [
    "BlobAccessError",
    "BlobError",
    "BlobIntegrityError",
    "BlobKeyError",
    "BlobNotFoundError",
    "BlobStore",
    "BlobStoreError",
    "BlobStoreMissingError",
    "BlobUnavailableError",
    "ContentStore",
    "LocalBlobStore",
    "check_digest",
    "seal",
    "unseal_verified",
]


class BlobError(StoreError):
    """Base of blob store errors; each message is one line naming the blob and the store.

    BlobError
    ├── BlobNotFoundError   the hash is not in the store
    │   └── BlobStoreMissingError  there is no store at all where one was expected (no
    │                              directory, no bucket); also a BlobStoreError
    ├── BlobIntegrityError  the stored bytes do not hash to their name
    ├── BlobKeyError        the blob is encrypted and no configured key opens it
    └── BlobStoreError      the store itself cannot be used: no blob's fault, not tampering
        ├── BlobAccessError       the store refused the credentials (until they change)
        └── BlobUnavailableError  the store did not answer, after retries (transient)
    """


class BlobNotFoundError(BlobError):
    pass


class BlobStoreError(BlobError):
    """The store as a whole cannot be used (configuration, credentials, network)."""


class BlobStoreMissingError(BlobNotFoundError, BlobStoreError):
    """The store itself is missing (a wrong data directory or bucket), which is not tampering."""


class BlobIntegrityError(BlobError):
    pass


class BlobKeyError(BlobError):
    """An encrypted blob with no key to open it, or the wrong key under its key id."""


class BlobAccessError(BlobStoreError):
    """Credentials missing, wrong or not allowed to read or write the store."""


class BlobUnavailableError(BlobStoreError):
    """The store could not be reached or kept failing; worth retrying later."""


class BlobStore(Protocol):
    """What a blob backend provides. Both calls are synchronous; callers run them in a thread,
    or in place for small work when the store is `on_local_disk` (`capstan.activities.inline`)."""

    #: its calls touch only local disk, each in proportion to its own data (no network)
    on_local_disk: bool

    def put(self, data: bytes) -> str:
        """Store `data` and return its sha256 hex digest. Idempotent."""
        ...

    def get(self, sha256: str) -> bytes:
        """Return the bytes for `sha256`, verified; raise BlobError otherwise."""
        ...


def check_digest(sha256: str) -> str:
    """`sha256` if it is a lowercase hex digest; a name from outside never becomes a path."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise BlobNotFoundError(f"not a sha256 digest: {sha256[:80]!r}")
    return sha256


def seal(data: bytes, sha256: str, keyring: Keyring | None) -> bytes:
    """The bytes to store for `data` (named `sha256`): an envelope with a keyring, else `data`."""
    return keyring.seal_blob(data, sha256) if keyring is not None else data


def unseal_verified(stored: bytes, sha256: str, keyring: Keyring | None, where: str) -> bytes:
    """The plaintext of stored bytes, verified against their name."""
    if hashlib.sha256(stored).hexdigest() == sha256:
        return stored  # plaintext: written without encryption, still authentic
    if is_sealed_blob(stored):
        if keyring is None:
            key_id, _ = blob_key_id(stored)
            raise BlobKeyError(
                f"blob {sha256} in {where} is encrypted (key id {key_id!r}) and no key is "
                "configured: set CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE"
            )
        try:
            data = keyring.open_blob(stored, sha256)
        except CodecError as exc:
            raise BlobKeyError(f"{exc} (in {where})") from None
        if hashlib.sha256(data).hexdigest() == sha256:
            return data
    raise BlobIntegrityError(f"blob {sha256} was altered: its content no longer matches")


class LocalBlobStore:
    """Blobs as files `<root>/<aa>/<rest of hash>`, written atomically (sealed with a keyring).

    `on_local_disk`: False for a directory that may be a network filesystem shared by several
    machines (`CAPSTAN_BLOB_URL`), where a call may wait on the network."""

    def __init__(
        self, root: Path, keyring: Keyring | None = None, *, on_local_disk: bool = True
    ) -> None:
        self.root = root  # created by the first write: a reader never makes directories
        self.keyring = keyring
        self.on_local_disk = on_local_disk
        #: fan-out directories this store made or found: one mkdir each, not one per write
        self._fanout: set[str] = set()

    def _path(self, sha256: str) -> Path:
        check_digest(sha256)
        return self.root / sha256[:2] / sha256[2:]

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.exists():
            return digest
        stored = seal(data, digest, self.keyring)
        if digest[:2] in self._fanout:
            try:
                self._replace(path, stored)
                return digest
            except FileNotFoundError:  # the directory went away (a store wiped under us)
                self._fanout.discard(digest[:2])
        self.write(path, stored)
        self._fanout.add(digest[:2])
        return digest

    @classmethod
    def write(cls, path: Path, stored: bytes) -> None:
        """Write `stored` to `path` atomically (a reader sees all of it or nothing)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        cls._replace(path, stored)

    @staticmethod
    def _replace(path: Path, stored: bytes) -> None:
        """`write` in a directory that exists."""
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(stored)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, sha256: str) -> bytes:
        path = self._path(sha256)
        try:
            stored = path.read_bytes()
        except FileNotFoundError:
            if not self.root.is_dir():
                raise BlobStoreMissingError(f"blob store not found at {self.root}") from None
            raise BlobNotFoundError(f"blob {sha256} is missing from {self.root}") from None
        return unseal_verified(stored, sha256, self.keyring, str(self.root))


class ContentStore:
    """Turns text into `Text` (inline or ref) and back, with a small in-memory read cache
    (bounded in entries and in bytes; safe to use from several threads).

    Example::

        store = ContentStore(LocalBlobStore(Path(".capstan/blobs")))
        ref = store.store_text("x" * 10_000)   # -> BlobRef
        assert store.resolve(ref) == "x" * 10_000
    """

    def __init__(
        self,
        blobs: BlobStore,
        count_tokens: Callable[[str], int] | None = None,
        inline_limit: int = INLINE_LIMIT_BYTES,
        cache_entries: int = 512,
        cache_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.blobs = blobs
        self.count_tokens = count_tokens or (lambda s: (len(s) + 3) // 4)
        self.inline_limit = inline_limit
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_entries = cache_entries
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._lock = threading.Lock()

    @property
    def on_local_disk(self) -> bool:
        """Whether its blobs are on local disk (`BlobStore.on_local_disk`)."""
        return self.blobs.on_local_disk

    def store_text(self, text: str) -> Text:
        """Inline when small (`fits_inline`), otherwise written to the store and referenced."""
        if self.fits_inline(text):
            return text
        return self.store_bytes(text.encode("utf-8"), text)

    def fits_inline(self, text: str) -> bool:
        """Whether `store_text(text)` is `text` itself, with no IO: async callers skip the
        thread hop a store needs (the test is exact: UTF-8 takes at most 4 bytes a character)."""
        return len(text) * 4 <= self.inline_limit or len(text.encode("utf-8")) <= self.inline_limit

    def store_bytes(self, data: bytes, text: str | None = None) -> BlobRef:
        """Always store. `text` (what `data` encodes) is counted and previewed for readers; a
        structured blob (a conversation segment, tool schemas: no `text`) is read by code
        only, so its ref carries neither: a JSON prefix told a reader nothing, and each
        model call's input and reply repeated it in history."""
        digest = self.blobs.put(data)
        self._remember(digest, data)
        if text is None:
            return BlobRef(sha256=digest, size=len(data))
        return BlobRef(
            sha256=digest,
            size=len(data),
            tokens=self.count_tokens(text),
            preview=preview_of(text),
        )

    def read_bytes(self, sha256: str) -> bytes:
        with self._lock:
            cached = self._cache.get(sha256)
            if cached is not None:
                self._cache.move_to_end(sha256)
                return cached
        data = self.blobs.get(sha256)
        self._remember(sha256, data)
        return data

    def resolve(self, text: Text) -> str:
        """The full text behind `text`, verified."""
        if isinstance(text, str):
            return text
        return self.read_bytes(text.sha256).decode("utf-8")

    def _remember(self, digest: str, data: bytes) -> None:
        if len(data) > self._cache_bytes:
            return
        with self._lock:
            if digest not in self._cache:
                self._cached_bytes += len(data)
            self._cache[digest] = data
            self._cache.move_to_end(digest)
            while self._cache and (
                len(self._cache) > self._cache_entries or self._cached_bytes > self._cache_bytes
            ):
                _, dropped = self._cache.popitem(last=False)
                self._cached_bytes -= len(dropped)
