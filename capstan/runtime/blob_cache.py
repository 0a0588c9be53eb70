"""A local read-through cache in front of a remote blob store, bounded in bytes.

A worker reads the conversation chain and tool results at every step; with a shared store
each read would be a round trip. The cache is a local blob directory (the same layout, the same
sealing and verification as `LocalBlobStore`), written through on `put` and filled on a miss.
It is only ever a copy: a cache entry that is missing, unreadable or fails verification is
dropped and read from the remote store again, and a cache that cannot be written is skipped —
the remote store is the truth, so the cache never turns a good read into an error.

Bounded in bytes: when the bytes this process has added push the total over `max_bytes`, the
directory is rescanned (other processes may share it) and the least recently used files, by
mtime (a hit touches its file), are deleted down to 90% of the bound.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from capstan.runtime.blobstore import (
    BlobIntegrityError,
    BlobKeyError,
    BlobNotFoundError,
    BlobStore,
    LocalBlobStore,
)
from capstan.runtime.codec import Keyring

__all__ = ["CachedBlobStore"]

_LOW_WATER = 0.9


class CachedBlobStore:
    """`remote` behind a local directory cache of at most `max_bytes` (0: no cache)."""

    on_local_disk = False  # a write, and a read the cache misses, go to `remote`

    def __init__(
        self, remote: BlobStore, root: Path, max_bytes: int, keyring: Keyring | None = None
    ) -> None:
        self.remote = remote
        self.local = LocalBlobStore(root, keyring)
        self.max_bytes = max_bytes
        self._total: int | None = None  # bytes in the directory, scanned on first write
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        digest = self.remote.put(data)
        self._keep(data)
        return digest

    def get(self, sha256: str) -> bytes:
        if self.max_bytes > 0:
            try:
                data = self.local.get(sha256)
            except BlobNotFoundError:
                pass
            except (BlobIntegrityError, BlobKeyError, OSError):
                self._drop(sha256)  # a bad copy: the remote store decides
            else:
                self._touch(sha256)
                return data
        data = self.remote.get(sha256)
        self._keep(data)
        return data

    def check(self) -> None:
        """The remote store's check, when it has one."""
        check = getattr(self.remote, "check", None)
        if callable(check):
            check()

    @property
    def cached_bytes(self) -> int:
        return sum(size for _, size, _ in _entries(self.local.root))

    def _keep(self, data: bytes) -> None:
        if not 0 < len(data) <= self.max_bytes:
            return
        try:
            self.local.put(data)
        except OSError:
            return  # a full or read-only disk costs speed, never a result
        with self._lock:
            if self._total is None:
                self._total = self.cached_bytes
            else:
                self._total += len(data)
            if self._total > self.max_bytes:
                self._total = self._evict()

    def _evict(self) -> int:
        """Delete the least recently used files down to the low-water mark; the new total."""
        entries = sorted(_entries(self.local.root), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        target = int(self.max_bytes * _LOW_WATER)
        for path, size, _ in entries:
            if total <= target:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size
        return total

    def _touch(self, sha256: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.local.root / sha256[:2] / sha256[2:])

    def _drop(self, sha256: str) -> None:
        with contextlib.suppress(OSError):
            (self.local.root / sha256[:2] / sha256[2:]).unlink()


def _entries(root: Path) -> list[tuple[Path, int, float]]:
    """`(path, size, mtime)` of every cached blob (temporary files of a write excluded)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for shard in os.scandir(root):
            if not shard.is_dir():
                continue
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(shard.path):
                    if entry.name.startswith(".tmp-"):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat()
                        found.append((Path(entry.path), st.st_size, st.st_mtime))
    return found
