"""What the loop knows about a model: window, output limit, prices, fallback chain. Pure types.

Resolved by the `describe_model` activity at run start from the worker's profiles, so it is in
history; keys are never part of it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ModelChain", "ModelInfo", "Prices"]


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

    @property
    def usable_window(self) -> int:
        """Tokens a request may take while leaving room for the reply."""
        return max(self.context_window - self.max_output_tokens, 1)


class ModelChain(BaseModel):
    """The primary model followed by its fallbacks, in order."""

    model_config = ConfigDict(frozen=True)

    models: tuple[ModelInfo, ...]
