"""Every failure of an A2A call as the protocol's own JSON-RPC error, in one line: never a
traceback, never an HTTP 5xx (the SDK's dispatcher sends these with status 200).

    caller's mistake                     A2A error (JSON-RPC code)
    an unknown task, another tenant's    TaskNotFoundError (-32001)
    a bad message, a request not open    InvalidParamsError (-32602)
    a scope the call needs               InvalidRequestError (-32600)
    Temporal away, a key missing, a bug  InternalError (-32603): the log has the details

The REST API's answers (`ApiError`) keep their meaning: 404 is an unknown task, 403 a missing
scope, 409/422 a bad input; 5xx are internal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
)
from temporalio.service import RPCError, RPCStatusCode

from capstan.api.errors import ApiError
from capstan.client.runs import RejectedError, RunNotFoundError, UpdateTimeoutError
from capstan.core.errors import CapstanError, ConnectError, SteeringError, StoreError
from capstan.runtime.blobstore import BlobKeyError
from capstan.runtime.codec import CodecError

__all__ = ["UNAVAILABLE", "a2a_errors", "as_a2a"]

log = logging.getLogger("capstan.api")
UNAVAILABLE = "the Temporal service is not reachable; try again shortly"
_INTERNAL = "the request failed; the server log has the details"
_BUSY = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)


def _from_api(exc: ApiError) -> A2AError:
    message = exc.detail.message
    if exc.status == 404:
        return TaskNotFoundError(message)
    if exc.status in (401, 403, 429):
        return InvalidRequestError(message)
    if exc.status < 500:
        return InvalidParamsError(message)
    return InternalError(message)


def _from_rpc(exc: RPCError) -> A2AError:
    if exc.status in _BUSY:
        return InternalError(UNAVAILABLE)
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidParamsError(f"Temporal refused the request: {exc.message}")
    log.error("Temporal call failed: %s (%s)", exc.message, exc.status)
    return InternalError(_INTERNAL)


def _from_capstan(exc: CapstanError) -> A2AError:
    if isinstance(exc, RunNotFoundError):
        return TaskNotFoundError(str(exc))
    if isinstance(exc, RejectedError):
        return InvalidParamsError(f"the run refused the input: {exc}")
    if isinstance(exc, UpdateTimeoutError):
        return InternalError(str(exc))
    if isinstance(exc, ConnectError):
        return InternalError(UNAVAILABLE)
    if isinstance(exc, CodecError | BlobKeyError):
        log.error("codec: %s", exc)  # key ids and setting names only: never key material
        return InternalError(f"this server cannot decrypt the run: {exc}")
    if isinstance(exc, StoreError):
        log.error("content store: %s", exc)
        return InternalError("the content store could not be read")
    if isinstance(exc, SteeringError):
        return InvalidParamsError(str(exc))
    return InvalidParamsError(str(exc))  # ThreadError, AgentsError: a bad name or definition


def as_a2a(exc: Exception) -> A2AError:
    """The A2A error a failure of a call is answered with."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, ApiError):
        return _from_api(exc)
    if isinstance(exc, CapstanError):
        return _from_capstan(exc)
    if isinstance(exc, RPCError):
        return _from_rpc(exc)
    log.error("unhandled error in an A2A call", exc_info=exc)
    return InternalError(_INTERNAL)


@contextlib.contextmanager
def a2a_errors() -> Iterator[None]:
    """Failures inside the block leave it as A2A errors (cancellation passes through)."""
    try:
        yield
    except Exception as exc:
        raise as_a2a(exc) from None
