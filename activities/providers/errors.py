"""Provider failures as Temporal application errors: one retry layer, Temporal's.

    ModelError (ApplicationError types, by retryability)
    ├── retryable:     ModelRateLimited (429), ModelServerError (5xx), ModelTimeout,
    │                  ModelConnectionError, ModelResponseInvalid
    └── non-retryable: ModelBadRequest (400), ModelAuthError (401/403), ModelNotFound (404),
                       ModelConfigError (no usable profile)

`retry-after` becomes `next_retry_delay`. Error text is scrubbed of key material first.
"""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from temporalio.exceptions import ApplicationError

__all__ = ["NON_RETRYABLE_TYPES", "error_for_response", "error_for_transport", "scrub"]

NON_RETRYABLE_TYPES = ("ModelBadRequest", "ModelAuthError", "ModelNotFound", "ModelConfigError")
MAX_RETRY_AFTER = 300.0
_KEYLIKE = re.compile(r"(sk|key|token)[-_][A-Za-z0-9_\-]{8,}|Bearer\s+\S+", re.IGNORECASE)


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove secrets and anything shaped like a key from provider text."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)[:600]


def _retry_after(response: httpx.Response) -> timedelta | None:
    ms = response.headers.get("retry-after-ms")
    raw = response.headers.get("retry-after")
    try:
        seconds = float(ms) / 1000 if ms else float(raw) if raw else None
    except ValueError:
        return None
    return None if seconds is None else timedelta(seconds=min(max(seconds, 0.0), MAX_RETRY_AFTER))


def error_for_response(response: httpx.Response, secrets: tuple[str, ...]) -> ApplicationError:
    """The ApplicationError for a non-2xx provider response."""
    status = response.status_code
    detail = scrub(response.text, secrets)
    message = f"model provider answered HTTP {status}: {detail}"
    if status == 429:
        return ApplicationError(
            message, type="ModelRateLimited", next_retry_delay=_retry_after(response)
        )
    if status >= 500 or status in (408, 409):
        return ApplicationError(
            message, type="ModelServerError", next_retry_delay=_retry_after(response)
        )
    kind = {400: "ModelBadRequest", 401: "ModelAuthError", 403: "ModelAuthError"}.get(
        status, "ModelNotFound" if status == 404 else "ModelBadRequest"
    )
    return ApplicationError(message, type=kind, non_retryable=True)


def error_for_transport(exc: httpx.TransportError, secrets: tuple[str, ...]) -> ApplicationError:
    """Timeouts and connection failures: retryable."""
    kind = "ModelTimeout" if isinstance(exc, httpx.TimeoutException) else "ModelConnectionError"
    detail = scrub(f"{type(exc).__name__}: {exc}", secrets)
    return ApplicationError(f"model provider unreachable ({detail})", type=kind)
