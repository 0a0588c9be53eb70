"""Pydantic payloads with one type adapter per type for the process (capstan.runtime.payloads):
the SDK builds a converter per workflow instance, so a cache per converter rebuilt every
adapter for every run and every replay."""

from __future__ import annotations

import base64
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from capstan.runtime.codec import data_converter, load_keyring
from capstan.runtime.payloads import SharedAdaptersPayloadConverter, adapter


class Point(BaseModel):
    x: int
    y: int


def test_converters_share_one_adapter_per_type() -> None:
    first, second = SharedAdaptersPayloadConverter(), SharedAdaptersPayloadConverter()
    payload = first.to_payloads([Point(x=1, y=2)])[0]
    adapter.cache_clear()
    assert first.from_payloads([payload], [Point]) == [Point(x=1, y=2)]
    assert second.from_payloads([payload], [Point]) == [Point(x=1, y=2)]
    info = adapter.cache_info()
    assert (info.misses, info.hits) == (1, 1)  # built once, found by the second converter


def test_unhashable_hints_and_no_hint_still_decode() -> None:
    converter = SharedAdaptersPayloadConverter()
    payload = converter.to_payloads([{"a": [1, 2]}])[0]
    unhashable: Any = Annotated[dict[str, list[int]], ["metadata in a list"]]
    with pytest.raises(TypeError):
        hash(unhashable)
    assert converter.from_payloads([payload], [unhashable]) == [{"a": [1, 2]}]
    assert converter.from_payloads([payload]) == [{"a": [1, 2]}]


def test_a_bad_payload_is_still_a_validation_error() -> None:
    converter = SharedAdaptersPayloadConverter()
    payload = converter.to_payloads([{"x": "not a number", "y": 2}])[0]
    with pytest.raises(Exception, match="x"):
        converter.from_payloads([payload], [Point])


@pytest.mark.parametrize("keys", [None, f"k1:{base64.b64encode(bytes(32)).decode()}"])
def test_capstan_converters_use_it(keys: str | None) -> None:
    converter = data_converter(load_keyring(keys, None)).payload_converter
    payload = converter.to_payloads([Point(x=3, y=4)])[0]
    adapter.cache_clear()
    assert converter.from_payloads([payload], [Point]) == [Point(x=3, y=4)]
    assert converter.from_payloads([payload], [Point]) == [Point(x=3, y=4)]
    assert adapter.cache_info().misses == 1  # the shared cache, with or without keys
