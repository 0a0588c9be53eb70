"""Names of model failure types, shared by the activities that raise them, the workflow that sets
retry policies and the loop that decides what a failure means. Pure constants.

    retryable (Temporal retries, honouring retry-after):
        ModelRateLimited 429 · ModelServerError 5xx/408/409 · ModelOverloaded 529 ·
        ModelTimeout · ModelConnectionError · ModelStreamCut · ModelResponseInvalid
    non-retryable:
        ModelBadRequest 400 · ModelAuthError 401/403 · ModelNotFound 404 ·
        ModelPayloadTooLarge 413 · ModelQuotaExhausted (429 insufficient_quota) ·
        ModelContentFiltered · ModelConfigError · ModelContextOverflow (the loop compacts)
"""

from __future__ import annotations

__all__ = ["CONTEXT_OVERFLOW", "FALLBACK_ON", "NON_RETRYABLE"]

CONTEXT_OVERFLOW = "ModelContextOverflow"

NON_RETRYABLE = (
    "ModelBadRequest",
    "ModelAuthError",
    "ModelNotFound",
    "ModelPayloadTooLarge",
    "ModelQuotaExhausted",
    "ModelContentFiltered",
    "ModelConfigError",
    CONTEXT_OVERFLOW,
)

#: Failures after which the next model of the fallback chain is tried: the model is unavailable
#: or its retries are spent, not a problem with the request itself.
FALLBACK_ON = (
    "ModelRateLimited",
    "ModelServerError",
    "ModelOverloaded",
    "ModelTimeout",
    "ModelConnectionError",
    "ModelStreamCut",
    "ModelResponseInvalid",
    "ModelNotFound",
    "ModelQuotaExhausted",
    "timeout",
)
