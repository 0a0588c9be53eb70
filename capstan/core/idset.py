"""The ids of every steering input a run applied, for the life of the run, in 8 bytes each.

"A repeated id is applied once" must hold however many inputs came in between and across
continue-as-new, so the set is never trimmed; it stays small because each id is kept as the first
8 bytes of its sha256, read as an unsigned 64-bit little-endian number, sorted, in one `bytes`
value (base64 in JSON): 32,768 ids take 256 KiB, membership is a binary search and an insert one
copy of the bytes. Pure.

No id the set has not seen is taken for one it has, in any sense that matters: two different
ids share a digest with probability 2^-64 per pair (over a run's whole allowance of 32,768 ids,
less than one chance in 10^10 that it ever happens), and choosing an id that collides on purpose
gains a sender nothing it could not do by resending the other id itself. A Bloom filter would
drop new ids at a rate one can measure; this does not.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer
from pydantic.dataclasses import dataclass

__all__ = ["DIGEST_BYTES", "IdSet", "digest"]

DIGEST_BYTES = 8


def digest(item_id: str) -> int:
    """The 8 bytes an id is remembered by, as an unsigned 64-bit number."""
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:DIGEST_BYTES], "little")


def _decoded(value: object) -> object:
    return base64.b64decode(value, validate=True) if isinstance(value, str) else value


#: Raw bytes in Python, base64 text in JSON (so histories stay readable and compact).
Digests = Annotated[
    bytes,
    BeforeValidator(_decoded),
    PlainSerializer(lambda b: base64.b64encode(b).decode("ascii"), when_used="json"),
]


def _numbers(data: bytes) -> Sequence[int]:
    """The digests as numbers, without a copy where the machine is little-endian (binary
    search then runs in C: a lookup costs about a microsecond)."""
    if sys.byteorder == "little":
        return memoryview(data).cast("Q")
    words = array("Q", data)
    words.byteswap()
    return words


def _find(data: bytes, key: int) -> tuple[int, bool]:
    """Where `key` is or would go in the sorted digests, and whether it is there."""
    numbers = _numbers(data)
    at = bisect_left(numbers, key)
    return at, at < len(numbers) and numbers[at] == key


@dataclass(frozen=True)
class IdSet:
    """A set of ids that only grows. `ids.with_ids("a")` is a new set; `"a" in ids` a lookup.

    Example::

        seen = IdSet().with_ids("m1", "m2")
        assert "m1" in seen and "m3" not in seen and len(seen) == 2
    """

    digests: Digests = b""

    def __post_init__(self) -> None:
        if len(self.digests) % DIGEST_BYTES:
            raise ValueError(f"digests must be a multiple of {DIGEST_BYTES} bytes")

    def __len__(self) -> int:
        return len(self.digests) // DIGEST_BYTES

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and _find(self.digests, digest(item_id))[1]

    def with_ids(self, *item_ids: str) -> IdSet:
        """This set plus `item_ids` (ids it holds already change nothing)."""
        data = self.digests
        for item_id in item_ids:
            key = digest(item_id)
            at, found = _find(data, key)
            if not found:
                cut = at * DIGEST_BYTES
                data = data[:cut] + key.to_bytes(DIGEST_BYTES, "little") + data[cut:]
        return self if data is self.digests else IdSet(data)
