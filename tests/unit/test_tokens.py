"""Token counting: right counts, a cache bounded in entries that holds no text, an encoding
that keeps working without its Python rank table, and an encoder released when idle."""

from __future__ import annotations

import platform
import subprocess
import sys
import time

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


def test_an_idle_encoder_is_released_and_loaded_again() -> None:
    tokens.count_tokens("warm the encoder up")
    assert tokens.loaded()
    now = time.monotonic()
    assert not tokens.release_if_idle(60, now=now)  # just used
    loads = tokens._encoder.loads
    assert tokens.release_if_idle(60, now=now + 61)
    assert not tokens.loaded()
    assert not tokens.release_if_idle(0)  # nothing left to release
    # a count made before needs no encoder; a new text loads it again, with the same counts
    assert tokens.count_tokens("warm the encoder up") == 4
    assert not tokens.loaded()
    assert tokens.count_tokens("hello world, once more") == 5
    assert tokens.loaded() and tokens._encoder.loads == loads + 1


def test_a_count_in_flight_keeps_its_encoder() -> None:
    held = tokens.encoding()
    assert tokens.release_if_idle(0, now=time.monotonic() + 1)
    assert len(held.encode("still works")) == 2  # the holder's reference keeps it alive


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_releasing_the_encoder_gives_its_memory_back() -> None:
    """In a child process as a worker has it (tuned malloc, counts from a thread): resident
    memory falls by most of the encoder's native tables once it is released and trimmed."""
    code = """
import threading
from capstan.activities import tokens
from capstan.host.memory import trim, tune_malloc
tune_malloc({})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
before = rss()
counting = threading.Thread(target=tokens.count_tokens, args=("some text to count",))
counting.start(); counting.join()
loaded = rss()
assert tokens.release_if_idle(0)
trim()
print(loaded - before, loaded - rss())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    grew, given_back = map(int, out.stdout.split())  # KiB
    assert grew > 15 * 1024, out.stdout
    assert given_back > 0.8 * grew, out.stdout
