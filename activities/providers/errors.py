"""Provider failures as Temporal application errors: one retry layer, Temporal's.

The type names and their retryability are listed in `capstan.core.model_errors`. `retry-after` and
`retry-after-ms` become `next_retry_delay` (capped). Error text is scrubbed here of the
profile's own key and of key shapes; every error then leaves the model activities through
`capstan.activities.providers.secrets.Scrubber.exit`, which removes every key the worker holds in
any encoding.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import httpx
from temporalio.exceptions import ApplicationError

from capstan.core.model_errors import CONTEXT_OVERFLOW, ModelErrorKind

__all__ = [
    "context_overflow",
    "error_for_response",
    "error_for_transport",
    "malformed",
    "redact_keylike",
    "scrub",
    "stream_cut",
]

MAX_RETRY_AFTER = 300.0
_KEYLIKE = re.compile(r"(sk|key|token)[-_][A-Za-z0-9_\-]{8,}|Bearer\s+\S+", re.IGNORECASE)
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|prompt is too long|"
    r"too many tokens|exceeds the context",
    re.IGNORECASE,
)
_FILTER = re.compile(r"content_filter|content_policy|safety system", re.IGNORECASE)


def redact_keylike(text: str) -> str:
    """`text` with anything shaped like a key or a bearer token redacted."""
    return _KEYLIKE.sub("[redacted]", text)


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove secrets and anything shaped like a key from provider text."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return redact_keylike(text)[:600]


def _retry_after(response: httpx.Response) -> timedelta | None:
    ms = response.headers.get("retry-after-ms")
    raw = response.headers.get("retry-after")
    try:
        seconds = float(ms) / 1000 if ms else float(raw) if raw else None
    except ValueError:
        return None
    return None if seconds is None else timedelta(seconds=min(max(seconds, 0.0), MAX_RETRY_AFTER))


def _error_code(body: str) -> str:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return ""
    return " ".join(str(error.get(k) or "") for k in ("code", "type"))


def context_overflow(detail: str) -> ApplicationError:
    return ApplicationError(
        f"the request does not fit the model's context window: {detail}",
        type=CONTEXT_OVERFLOW,
        non_retryable=True,
    )


def error_for_response(
    response: httpx.Response, body: str, secrets: tuple[str, ...]
) -> ApplicationError:
    """The ApplicationError for a non-2xx provider response."""
    status = response.status_code
    detail = scrub(body, secrets)
    message = f"model provider answered HTTP {status}: {detail}"
    code = _error_code(body)
    if status in (400, 413) and _OVERFLOW.search(body):
        return context_overflow(message)
    if status == 429 and "insufficient_quota" in code + body:
        return ApplicationError(message, type=ModelErrorKind.QUOTA_EXHAUSTED, non_retryable=True)
    if status == 400 and _FILTER.search(code + body):
        return ApplicationError(message, type=ModelErrorKind.CONTENT_FILTERED, non_retryable=True)
    delay = _retry_after(response)
    if status == 429:
        return ApplicationError(message, type=ModelErrorKind.RATE_LIMITED, next_retry_delay=delay)
    if status == 529:
        return ApplicationError(message, type=ModelErrorKind.OVERLOADED, next_retry_delay=delay)
    if status >= 500 or status in (408, 409):
        return ApplicationError(message, type=ModelErrorKind.SERVER_ERROR, next_retry_delay=delay)
    kind = {
        401: ModelErrorKind.AUTH_ERROR,
        403: ModelErrorKind.AUTH_ERROR,
        404: ModelErrorKind.NOT_FOUND,
        413: ModelErrorKind.PAYLOAD_TOO_LARGE,
    }.get(status, ModelErrorKind.BAD_REQUEST)
    return ApplicationError(message, type=kind, non_retryable=True)


def error_for_transport(exc: httpx.TransportError, secrets: tuple[str, ...]) -> ApplicationError:
    """Timeouts and connection failures (including a stream that broke): retryable."""
    if isinstance(exc, httpx.TimeoutException):
        kind = ModelErrorKind.TIMEOUT
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        kind = ModelErrorKind.STREAM_CUT
    else:
        kind = ModelErrorKind.CONNECTION_ERROR
    detail = scrub(f"{type(exc).__name__}: {exc}", secrets)
    return ApplicationError(f"model provider unreachable ({detail})", type=kind)


def stream_cut(detail: str) -> ApplicationError:
    return ApplicationError(
        f"the reply stream ended early: {detail}", type=ModelErrorKind.STREAM_CUT
    )


def malformed(detail: str) -> ApplicationError:
    return ApplicationError(
        f"model provider sent a malformed reply: {scrub(detail)}",
        type=ModelErrorKind.RESPONSE_INVALID,
    )
