"""What the loop knows about a model: window, output limit, prices, fallback chain. Pure types.

Resolved by the `describe_model` activity at run start from the worker's profiles, so it is in
history; keys are never part of it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ModelChain", "ModelInfo", "Prices", "model_queue"]


class Prices(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True)

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


class ModelInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: str
    provider: str
    model: str
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    prices: Prices = Prices()
    #: its calls go to a task queue of their own (`model_queue`), where the Temporal server
    #: enforces the profile's limits for every worker at once (`[limits.NAME]`, issue 30)
    own_queue: bool = False

    @property
    def usable_window(self) -> int:
        """Tokens a request may take while leaving room for the reply."""
        return max(self.context_window - self.max_output_tokens, 1)


class ModelChain(BaseModel):
    """The primary model followed by its fallbacks, in order."""

    model_config = ConfigDict(frozen=True)

    models: tuple[ModelInfo, ...]


def model_queue(task_queue: str, profile: str) -> str:
    """The task queue of the model calls of `profile` for runs on `task_queue`, when the
    profile has limits (`ModelInfo.own_queue`): the server rate-limits and orders that queue
    for the whole fleet (`capstan limits`)."""
    return f"{task_queue}.model.{profile}"
