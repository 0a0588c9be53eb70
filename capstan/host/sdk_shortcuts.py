"""Skip Temporal's payload walks where they cannot change anything.

Temporal's Python SDK (1.35) walks every workflow activation it decodes and every completion it
encodes three times with its payload visitor — for reference payloads, external storage and
the codec — and each walk copies every payload sequence it passes, whether or not a codec or
external storage is configured (`DataConverter._decode_payload_has_effect` marks the missing
short-circuit as temporary). A worker without keys has neither (`capstan.runtime.codec`), so
for its runs the walks are pure cost, on every iteration and every replay of an evicted run
(the overhead bench's figures are in bench/README.md).

`install()` wraps the SDK's two module functions so that they return at once for a converter
that is Capstan's keyless one and do exactly what they did for any other: with keys (the codec
must run), with external storage, and for every other worker in the process (an embedding
application's, the bench's floor). It changes nothing, and says so at debug level, if the SDK's
functions are not the shape this was written against. An encrypted or externally stored payload
that reaches a keyless worker is still refused, by the payload converter, in one line.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.converter import DataConverter

from capstan.runtime.codec import KeylessPayloadConverter

__all__ = ["install", "skips"]

log = logging.getLogger("capstan.host.sdk_shortcuts")

_MARK = "__capstan_skips_idle_payload_walks__"
_SHAPES = {
    "decode_activation": [
        "activation",
        "data_converter",
        "decode_headers",
        "storage_concurrency_limit",
    ],
    "encode_completion": [
        "completion",
        "data_converter",
        "encode_headers",
        "storage_concurrency_limit",
    ],
}


def skips(data_converter: DataConverter) -> bool:
    """Whether the walks can be skipped for `data_converter`: Capstan's, no codec, no storage."""
    return (
        data_converter.payload_converter_class is KeylessPayloadConverter
        and data_converter.payload_codec is None
        and data_converter.external_storage is None
    )


def _skipping(original: Callable[..., Awaitable[Any]], empty: Callable[[], Any]) -> Any:
    async def walk(message: Any, data_converter: DataConverter, *args: Any, **kwargs: Any) -> Any:
        if skips(data_converter):
            return empty()  # the metrics of no storage operation
        return await original(message, data_converter, *args, **kwargs)

    walk.__name__ = original.__name__
    walk.__doc__ = original.__doc__
    setattr(walk, _MARK, True)
    return walk


def install() -> bool:
    """Wrap the SDK's walks once per process; True if they are (now or already) wrapped."""
    try:
        import temporalio.bridge.worker as bridge
        from temporalio.converter._extstore import StorageOperationMetrics
    except ImportError as exc:  # a future SDK: leave it alone
        log.debug("payload walks not shortened: %s", exc)
        return False
    functions = {name: getattr(bridge, name, None) for name in _SHAPES}
    if all(getattr(f, _MARK, False) for f in functions.values()):
        return True
    for name, function in functions.items():
        shape = list(inspect.signature(function).parameters) if callable(function) else None
        if shape != _SHAPES[name]:
            log.debug("payload walks not shortened: %s is %s, not %s", name, shape, _SHAPES[name])
            return False
    for name, function in functions.items():
        setattr(bridge, name, _skipping(function, StorageOperationMetrics))  # type: ignore[arg-type]
    return True
