"""The kinds of failure a model call can end with, shared by the activities that raise them, the
workflow that sets retry policies and the loop that decides what a failure means. Pure constants.

    retryable (Temporal retries, honouring retry-after):
        RATE_LIMITED 429 · SERVER_ERROR 5xx/408/409 · OVERLOADED 529 ·
        TIMEOUT · CONNECTION_ERROR · STREAM_CUT · RESPONSE_INVALID
    non-retryable:
        BAD_REQUEST 400 · AUTH_ERROR 401/403 · NOT_FOUND 404 ·
        PAYLOAD_TOO_LARGE 413 · QUOTA_EXHAUSTED (429 insufficient_quota) ·
        CONTENT_FILTERED · CONFIG_ERROR · CONTEXT_OVERFLOW (the loop compacts)

The values are the `ApplicationError` types recorded in history: never rename one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CONTEXT_OVERFLOW", "FALLBACK_ON", "NON_RETRYABLE", "ModelErrorKind"]


class ModelErrorKind(StrEnum):
    RATE_LIMITED = "ModelRateLimited"
    SERVER_ERROR = "ModelServerError"
    OVERLOADED = "ModelOverloaded"
    TIMEOUT = "ModelTimeout"
    CONNECTION_ERROR = "ModelConnectionError"
    STREAM_CUT = "ModelStreamCut"
    RESPONSE_INVALID = "ModelResponseInvalid"
    BAD_REQUEST = "ModelBadRequest"
    AUTH_ERROR = "ModelAuthError"
    NOT_FOUND = "ModelNotFound"
    PAYLOAD_TOO_LARGE = "ModelPayloadTooLarge"
    QUOTA_EXHAUSTED = "ModelQuotaExhausted"
    CONTENT_FILTERED = "ModelContentFiltered"
    CONFIG_ERROR = "ModelConfigError"
    CONTEXT_OVERFLOW = "ModelContextOverflow"
    #: not raised by a provider: the activity itself timed out (see the workflow's `_describe`)
    ACTIVITY_TIMEOUT = "timeout"

    @property
    def retryable(self) -> bool:
        return self not in NON_RETRYABLE


CONTEXT_OVERFLOW = ModelErrorKind.CONTEXT_OVERFLOW

NON_RETRYABLE: frozenset[ModelErrorKind] = frozenset(
    {
        ModelErrorKind.BAD_REQUEST,
        ModelErrorKind.AUTH_ERROR,
        ModelErrorKind.NOT_FOUND,
        ModelErrorKind.PAYLOAD_TOO_LARGE,
        ModelErrorKind.QUOTA_EXHAUSTED,
        ModelErrorKind.CONTENT_FILTERED,
        ModelErrorKind.CONFIG_ERROR,
        ModelErrorKind.CONTEXT_OVERFLOW,
    }
)

#: Failures after which the next model of the fallback chain is tried: the model is unavailable
#: or its retries are spent, not a problem with the request itself.
FALLBACK_ON: frozenset[ModelErrorKind] = frozenset(
    {
        ModelErrorKind.RATE_LIMITED,
        ModelErrorKind.SERVER_ERROR,
        ModelErrorKind.OVERLOADED,
        ModelErrorKind.TIMEOUT,
        ModelErrorKind.CONNECTION_ERROR,
        ModelErrorKind.STREAM_CUT,
        ModelErrorKind.RESPONSE_INVALID,
        ModelErrorKind.NOT_FOUND,
        ModelErrorKind.QUOTA_EXHAUSTED,
        ModelErrorKind.ACTIVITY_TIMEOUT,
    }
)
