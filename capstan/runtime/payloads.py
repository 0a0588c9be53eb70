"""Pydantic payloads with one type adapter per type for the whole process.

Temporal's Python SDK builds a new payload converter for every workflow instance (and for
every payload its codec visits), and `temporalio.contrib.pydantic` gives each converter its own
cache of `pydantic.TypeAdapter`s. So every run a worker loads, and every replay of an evicted
run, built its adapters again: ~27 KB and ~200 allocations per cached run, and CPU on every
replay. The adapters depend only on the type, so one bounded cache per process serves all runs.

Runs whose workflow is sandboxed strictly (`CAPSTAN_WORKFLOW_SANDBOX=strict`) re-import
Capstan's types per run, so their entries are per run and simply age out of the bound.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)

__all__ = [
    "ADAPTER_CACHE_SIZE",
    "SharedAdaptersPayloadConverter",
    "adapter",
    "shared_encoding_converters",
]

#: distinct type hints whose adapters are kept (Capstan's workflow uses a few dozen)
ADAPTER_CACHE_SIZE = 512


@functools.lru_cache(maxsize=ADAPTER_CACHE_SIZE)
def adapter(hint: Any) -> TypeAdapter[Any]:
    """The process's adapter for a hashable type hint (thread-safe: activities and workflow
    activations convert payloads from several threads)."""
    return TypeAdapter(hint)


class _SharedAdaptersJSON(PydanticJSONPlainPayloadConverter):
    """The SDK's pydantic JSON converter, reading through the process-wide adapter cache."""

    def __init__(self) -> None:
        super().__init__(max_cached_type_adapters=0)

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        hint: Any = type_hint if type_hint is not None else Any
        try:
            found = adapter(hint)
        except TypeError:
            try:
                hash(hint)
            except TypeError:  # an unhashable hint: no cache, as the SDK does
                found = TypeAdapter(hint)
            else:
                raise
        return found.validate_json(payload.data)


_JSON = _SharedAdaptersJSON()  # stateless apart from the shared cache: one for every converter


def shared_encoding_converters() -> tuple[EncodingPayloadConverter, ...]:
    """The SDK's default encodings, JSON read through the shared adapters."""
    return tuple(
        _JSON if isinstance(c, JSONPlainPayloadConverter) else c
        for c in DefaultPayloadConverter.default_encoding_payload_converters
    )


class SharedAdaptersPayloadConverter(CompositePayloadConverter):
    """`PydanticPayloadConverter` with shared adapters; nullary, as the SDK requires of a
    `payload_converter_class`, and cheap to build (the SDK builds one per payload it visits)."""

    def __init__(self) -> None:
        super().__init__(*shared_encoding_converters())
