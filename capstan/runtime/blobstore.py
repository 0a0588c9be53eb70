"""The content-addressed blob store: large content is written once and referenced by sha256.

Activities write blobs; the client reads them to resolve transcripts and audits. Every read
verifies the hash, so a missing or altered blob is an error, never silently wrong content.
`LocalBlobStore` is the embedded default; anything with `put`/`get` (S3, Postgres) can replace it.

This is an edge module (file IO); the pure core only ever sees `BlobRef`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from capstan.core.content import INLINE_LIMIT_BYTES, BlobRef, Text, preview_of

__all__ = [
    "BlobError",
    "BlobIntegrityError",
    "BlobNotFoundError",
    "BlobStore",
    "BlobStoreMissingError",
    "ContentStore",
    "LocalBlobStore",
]


class BlobError(Exception):
    """Base of blob store errors.

    BlobError
    ├── BlobNotFoundError   the hash is not in the store
    │   └── BlobStoreMissingError  there is no store at all where one was expected
    └── BlobIntegrityError  the stored bytes do not hash to their name
    """


class BlobNotFoundError(BlobError):
    pass


class BlobStoreMissingError(BlobNotFoundError):
    """The store itself is missing (a wrong data directory), which is not tampering."""


class BlobIntegrityError(BlobError):
    pass


class BlobStore(Protocol):
    """What a blob backend provides. Both calls are synchronous; callers run them in a thread."""

    def put(self, data: bytes) -> str:
        """Store `data` and return its sha256 hex digest. Idempotent."""
        ...

    def get(self, sha256: str) -> bytes:
        """Return the bytes for `sha256`, verified; raise BlobError otherwise."""
        ...


class LocalBlobStore:
    """Blobs as files `<root>/<aa>/<rest of hash>`, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root  # created by the first write: a reader never makes directories

    def _path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise BlobNotFoundError(f"not a sha256 digest: {sha256[:80]!r}")
        return self.root / sha256[:2] / sha256[2:]

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, sha256: str) -> bytes:
        path = self._path(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if not self.root.is_dir():
                raise BlobStoreMissingError(f"blob store not found at {self.root}") from None
            raise BlobNotFoundError(f"blob {sha256} is missing from {self.root}") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BlobIntegrityError(f"blob {sha256} was altered: its content no longer matches")
        return data


class ContentStore:
    """Turns text into `Text` (inline or ref) and back, with a small read cache.

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
    ) -> None:
        self.blobs = blobs
        self.count_tokens = count_tokens or (lambda s: (len(s) + 3) // 4)
        self.inline_limit = inline_limit
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_entries = cache_entries

    def store_text(self, text: str) -> Text:
        """Inline when small, otherwise written to the store and referenced."""
        data = text.encode("utf-8")
        if len(data) <= self.inline_limit:
            return text
        return self.store_bytes(data, text)

    def store_bytes(self, data: bytes, text: str | None = None) -> BlobRef:
        """Always store; used for structured blobs (conversation segments, tool schemas)."""
        digest = self.blobs.put(data)
        self._remember(digest, data)
        decoded = text if text is not None else data.decode("utf-8", errors="replace")
        return BlobRef(
            sha256=digest,
            size=len(data),
            tokens=self.count_tokens(decoded) if text is not None else 0,
            preview=preview_of(decoded),
        )

    def read_bytes(self, sha256: str) -> bytes:
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
        self._cache[digest] = data
        self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
