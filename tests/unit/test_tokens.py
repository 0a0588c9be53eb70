"""Token counting: right counts, a cache bounded in entries that holds no text, and an
encoding that keeps working without its Python rank table."""

from __future__ import annotations

import pytest

from capstan.activities import tokens


def test_counts_are_cl100k_counts() -> None:
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("") == 0
    assert tokens.count_tokens("<|endoftext|>") > 1  # special-token text counted as text
    assert tokens.encoding()._mergeable_ranks == {}  # dropped: the Rust encoder has its own


def test_the_cache_is_bounded_and_keyed_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "COUNT_CACHE_ENTRIES", 3)
    monkeypatch.setattr(tokens, "_counts", type(tokens._counts)())
    texts = [f"tool output number {i} " * 200 for i in range(5)]
    counts = [tokens.count_tokens(t) for t in texts]
    assert len(tokens._counts) == 3
    assert all(len(key) == 16 for key in tokens._counts)  # no text is kept
    assert [tokens.count_tokens(t) for t in texts] == counts  # evicted ones are recounted
