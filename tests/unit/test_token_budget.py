"""A provider's stated tokens-per-minute budget (`activities/providers/token_budget.py`), and
the worker slowing the fleet when a reply says less is left than the call took."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from capstan.activities.model import ModelActivities
from capstan.activities.providers.base import ProviderReply
from capstan.activities.providers.token_budget import MAX_RESET, TokenBudget, token_budget
from capstan.core.messages import Usage

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [("1s", 1.0), ("1.5s", 1.5), ("20ms", 0.02), ("1m30s", 90.0), ("6m0s", MAX_RESET)],
)
def test_openai_states_its_reset_as_a_duration(reset: str, seconds: float) -> None:
    headers = {"x-ratelimit-remaining-tokens": "1200", "x-ratelimit-reset-tokens": reset}
    assert token_budget(headers) == TokenBudget(1200, seconds)


def test_anthropic_states_its_reset_as_a_time() -> None:
    headers = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2026-12-03T12:00:07Z",
    }
    assert token_budget(headers, now=lambda: NOW) == TokenBudget(0, 7.0)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ratelimit-remaining-tokens": "5"},  # no reset
        {"x-ratelimit-reset-tokens": "1s"},  # nothing remaining stated
        {"x-ratelimit-remaining-tokens": "many", "x-ratelimit-reset-tokens": "1s"},
        {"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "soon"},
        {"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "1s2x"},
        {"anthropic-ratelimit-tokens-remaining": "5", "anthropic-ratelimit-tokens-reset": "12:00"},
    ],
)
def test_what_is_not_stated_or_not_readable_is_no_budget(headers: dict[str, str]) -> None:
    assert token_budget(headers, now=lambda: NOW) is None


def test_a_reset_in_the_past_or_a_negative_count_is_zero() -> None:
    headers = {
        "anthropic-ratelimit-tokens-remaining": "-3",
        "anthropic-ratelimit-tokens-reset": "2026-12-03T11:59:00Z",
    }
    assert token_budget(headers, now=lambda: NOW) == TokenBudget(0, 0.0)


def _worker(limited: set[str]) -> tuple[Any, list[tuple[str, float | None]]]:
    told: list[tuple[str, float | None]] = []
    worker = SimpleNamespace(
        limited=frozenset(limited), on_pushback=lambda p, s: told.append((p, s))
    )
    return worker, told


def _reply(left: int | None, reset: float | None = 3.0) -> ProviderReply:
    return ProviderReply(
        usage=Usage(input_tokens=900, output_tokens=100),
        tokens_remaining=left,
        tokens_reset=reset,
    )


def test_a_budget_smaller_than_the_call_slows_the_fleet_until_it_resets() -> None:
    worker, told = _worker({"main"})
    ModelActivities._budget_spent(worker, "main", _reply(999))
    assert told == [("main", 3.0)]


def test_a_budget_that_covers_another_call_slows_nothing() -> None:
    worker, told = _worker({"main"})
    ModelActivities._budget_spent(worker, "main", _reply(1000))
    ModelActivities._budget_spent(worker, "main", _reply(None))  # the provider said nothing
    ModelActivities._budget_spent(worker, "other", _reply(0))  # no queue of its own to slow
    assert told == []
