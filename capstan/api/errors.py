"""Every failure of the HTTP API as one JSON body — never a stack trace.

    {"error": {"code": "run_not_found", "message": "no run 'x'", "field": null}}

Codes and statuses: `unauthorized` 401 (no or bad token), `forbidden` 403 (a scope is missing),
`run_not_found` 404 (unknown run, or a run of another tenant: the same body), `conflict` 409
(a steering input the run cannot take, an id in use), `too_large` 413 (refused before the body
is read), `invalid` 422 (names the field), `rate_limited` 429 and `temporal_unavailable` 503
(both with Retry-After), `codec_key` 500 (the run is encrypted and this server has no key, or
not the one it was encrypted with: the message names the key id and `CAPSTAN_CODEC_KEYS` /
`CAPSTAN_CODEC_KEY_FILE`, never key material), `internal` 500 (the details go to the server log
only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from capstan.client.runs import (
    RejectedError,
    RunNotFoundError,
    SteeringError,
    UpdateTimeoutError,
)
from capstan.runtime.blobstore import BlobError, BlobKeyError
from capstan.runtime.codec import CodecError
from capstan.runtime.temporal_connection import TemporalConnectError

__all__ = [
    "ERROR_RESPONSES",
    "RETRY_AFTER_SECONDS",
    "ApiError",
    "BodyLimit",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "install_error_handlers",
    "not_found",
]

log = logging.getLogger("capstan.api")
RETRY_AFTER_SECONDS = 5


class ErrorDetail(BaseModel):
    code: str
    message: str
    #: the offending field of a 422 (`body.max_steps`, `query.limit`)
    field: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


#: the error statuses every API route documents in the OpenAPI document
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (401, "no or bad bearer token"),
        (403, "the token lacks a scope"),
        (404, "no such run for this token"),
        (409, "the run cannot take this input now, or the id is taken"),
        (413, "the body is too large"),
        (422, "the input does not validate (the field is named)"),
        (429, "too many writes: see Retry-After"),
        (503, "Temporal is unavailable, or no worker answered in time: see Retry-After"),
    )
}


class ApiError(Exception):
    """An answer other than success, with its status and code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = ErrorDetail(code=code, message=message, field=field)
        self.headers = dict(headers or {})


def not_found(run_id: str) -> ApiError:
    """The one answer for an unknown run and for another tenant's run."""
    return ApiError(404, "run_not_found", f"no run {run_id!r}")


def error_response(error: ApiError) -> JSONResponse:
    body = ErrorBody(error=error.detail).model_dump(mode="json")
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _unavailable() -> ApiError:
    return ApiError(
        503,
        "temporal_unavailable",
        "the Temporal service is not reachable; try again shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _from_rpc(exc: RPCError) -> ApiError:
    if exc.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    ):
        return _unavailable()
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return ApiError(422, "invalid", f"Temporal refused the request: {exc.message}")
    log.error("Temporal call failed: %s (%s)", exc.message, exc.status)
    return ApiError(500, "internal", "the request failed; the server log has the details")


def _validation_error(exc: RequestValidationError) -> ApiError:
    problems = exc.errors()
    first = problems[0] if problems else {"loc": (), "msg": "invalid input"}
    field = ".".join(str(p) for p in first.get("loc", ())) or None
    message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return ApiError(422, "invalid", message, field=field)


def _from_steering(exc: SteeringError) -> ApiError:
    if isinstance(exc, RejectedError):
        return ApiError(409, "rejected", f"the run rejected the input: {exc}")
    if isinstance(exc, UpdateTimeoutError):
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return ApiError(503, "worker_timeout", str(exc), headers=retry)
    return ApiError(409, "conflict", str(exc))


def _translate(exc: Exception) -> ApiError:
    """The API's answer to an exception raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestValidationError):
        return _validation_error(exc)
    if isinstance(exc, HTTPException) and exc.status_code == 400:
        # FastAPI's answer to a body it cannot parse (not JSON, not UTF-8): a schema error too
        return ApiError(422, "invalid", "the body is not valid JSON", field="body")
    if isinstance(exc, HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return ApiError(exc.status_code, code, str(exc.detail), headers=exc.headers)
    if isinstance(exc, RunNotFoundError):
        return ApiError(404, "run_not_found", str(exc))
    if isinstance(exc, WorkflowAlreadyStartedError):
        return ApiError(409, "conflict", "this run id is not available; choose another")
    if isinstance(exc, SteeringError):
        return _from_steering(exc)
    if isinstance(exc, TemporalConnectError):
        return _unavailable()
    if isinstance(exc, RPCError):
        return _from_rpc(exc)
    if isinstance(exc, CodecError | BlobKeyError):
        log.error("codec: %s", exc)  # key ids and setting names only: never key material
        return ApiError(500, "codec_key", f"this server cannot decrypt the run: {exc}")
    if isinstance(exc, BlobError):
        log.error("blob store: %s", exc)
        return ApiError(500, "internal", "the content store could not be read")
    log.error("unhandled error", exc_info=exc)
    return ApiError(500, "internal", "the request failed; the server log has the details")


def install_error_handlers(app: FastAPI) -> None:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return error_response(_translate(exc))

    for kind in (
        ApiError,
        RequestValidationError,
        HTTPException,
        RunNotFoundError,
        SteeringError,
        WorkflowAlreadyStartedError,
        TemporalConnectError,
        RPCError,
        BlobError,
        CodecError,
        Exception,
    ):
        app.add_exception_handler(kind, handle)


class TooLargeError(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "too_large", f"the body is larger than {limit} bytes")


class BodyLimit:
    """Refuse bodies above `limit` bytes with 413: a declared length at once, a chunked body
    as soon as it passes the limit. The body is read here (at most `limit` bytes are held)
    and handed on whole, so nothing of a refused request reaches a route."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error_response(TooLargeError(self.limit))(scope, receive, send)
            return
        body, message = b"", await receive()
        while message["type"] == "http.request":
            body += message.get("body", b"")
            if len(body) > self.limit:
                await error_response(TooLargeError(self.limit))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
            message = await receive()
        first: Message | None = (
            {"type": "http.request", "body": body, "more_body": False}
            if message["type"] == "http.request"
            else message
        )

        async def replay() -> Message:
            nonlocal first
            if first is not None:
                handed, first = first, None
                return handed
            return await receive()

        await self.app(scope, replay, send)
