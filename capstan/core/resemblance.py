"""How alike two tool results are, judged from sketches small enough to carry in the run state.

The similar-results breaker must tell "the same result again" (a loop) from "a different result
of the same size" (a batch job over many files). Length alone cannot; the text itself is too
large to keep. A sketch is the bottom-k MinHash of a result's character shingles: the
`SKETCH_SIZE` smallest 32-bit hashes of its 5-character pieces. Two sketches estimate the
Jaccard resemblance of the texts (exactly, for texts shorter than the sketch), so "nearly the
same" means a share of shared pieces, whatever the size.

Before shingling, the argument values a call passed are cut out of its result: a result that
only echoes what was asked ("no match for 'q7'") is the same result for every question.

Pure: deterministic hashes (blake2b), no IO, no state of its own.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable

__all__ = ["NEAR_SAME", "SKETCH_SIZE", "Sketch", "digest_sketch", "resemblance", "sketch_of"]

#: Hashes kept per sketch: an estimate's standard error is about 0.05 near `NEAR_SAME`.
SKETCH_SIZE = 64
#: Results sharing at least this share of their shingles count as nearly the same. A result
#: that differs from the last only by a request id and a duration shares ~0.85; two files
#: that are 80% one template ~0.7; different files of one kind 0.2-0.3.
NEAR_SAME = 0.75
SHINGLE_CHARS = 5
#: Argument values shorter than this are not cut out (they would cut common letters).
ECHO_MIN_CHARS = 3
#: Text beyond this is not read: a sketch of the start is enough to spot a repeat.
MAX_CHARS = 16_384

Sketch = tuple[int, ...]


def _hash(piece: str) -> int:
    return int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "big")


def sketch_of(text: str, echoes: Iterable[str] = ()) -> Sketch:
    """The sketch of `text`, with each of `echoes` (the call's argument values) cut out."""
    text = text[:MAX_CHARS]
    for echo in sorted({e for e in echoes if len(e) >= ECHO_MIN_CHARS}, key=len, reverse=True):
        text = text.replace(echo, "\x00")
    flat = " ".join(text.split())
    last = max(len(flat) - SHINGLE_CHARS + 1, 1)
    hashes = {_hash(flat[i : i + SHINGLE_CHARS]) for i in range(last)}
    return tuple(heapq.nsmallest(SKETCH_SIZE, hashes))


def digest_sketch(sha256: str) -> Sketch:
    """The sketch of content known only by its digest (a blob): alike only when identical."""
    return (int(sha256[:8], 16),)


def resemblance(a: Sketch, b: Sketch) -> float:
    """The estimated Jaccard resemblance of the two texts behind `a` and `b` (0.0 to 1.0).

    Of the `SKETCH_SIZE` smallest hashes of both, the share found in both: each of them is
    among the smallest of its own text too, so it is in that text's sketch if it is in the text.
    """
    first, second = set(a), set(b)
    union = heapq.nsmallest(SKETCH_SIZE, first | second)
    if not union:
        return 1.0
    return sum(1 for h in union if h in first and h in second) / len(union)
