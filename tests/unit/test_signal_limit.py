"""A send to a run at Temporal's limit of signals per execution waits for the run to continue
as new, then lands in the next execution; past the wait it is one clear line."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from capstan.api.errors import _translate
from capstan.client import runs
from capstan.client.runs import CapstanClient, SignalLimitError
from capstan.core.steering import LiveMessage
from capstan.runtime.config import Settings

#: Temporal's own text for a signal past `limit.maxSignalsPerExecution`
AT_LIMIT = "exceeded workflow execution limit for signal events"


class _Handle:
    """Refuses the first `refusals` signals with `message`, then takes them."""

    def __init__(self, refusals: int, message: str = AT_LIMIT) -> None:
        self.refusals = refusals
        self.message = message
        self.sent: list[Any] = []

    async def signal(self, name: str, item: Any) -> None:
        if self.refusals:
            self.refusals -= 1
            raise RPCError(self.message, RPCStatusCode.INVALID_ARGUMENT, b"")
        self.sent.append((name, item))


class _Client:
    def __init__(self, handle: _Handle) -> None:
        self.handle = handle

    def get_workflow_handle(self, *_: Any, **__: Any) -> _Handle:
        return self.handle


def _capstan(handle: _Handle) -> CapstanClient:
    return CapstanClient(_Client(handle), Settings(identity="me"))  # type: ignore[arg-type]


async def test_a_send_at_the_signal_limit_lands_once_the_run_continues() -> None:
    handle = _Handle(refusals=3)
    await _capstan(handle).send_message("r-1", "hello", "m-1")
    assert handle.refusals == 0
    [(_, item)] = handle.sent  # sent once it was taken, with the same id
    assert isinstance(item, LiveMessage) and item.id == "m-1" and item.text == "hello"


async def test_a_run_that_never_continues_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runs, "SIGNAL_LIMIT_WAIT", 0.2)
    handle = _Handle(refusals=1_000)
    with pytest.raises(SignalLimitError) as caught:
        await _capstan(handle).send_message("r-1", "hello", "m-1")
    message = str(caught.value)
    assert "\n" not in message and "'r-1'" in message and "limit of signals" in message
    assert not handle.sent
    # the API answers it as a transient refusal, to be sent again later
    error = _translate(caught.value)
    assert error.status == 503 and error.detail.code == "signal_limit"
    assert error.headers is not None and "Retry-After" in error.headers


async def test_another_invalid_argument_is_not_waited_out() -> None:
    handle = _Handle(refusals=1, message="blob size exceeds limit")
    with pytest.raises(RPCError, match="blob size"):
        await _capstan(handle).send_message("r-1", "hello", "m-1")
    assert handle.refusals == 0 and not handle.sent


async def test_each_attempt_is_told_its_number() -> None:
    """A send aimed at one execution looks the run up again when `attempt` is not 0."""
    seen: list[int] = []

    async def send(attempt: int) -> str:
        seen.append(attempt)
        if attempt < 2:
            raise RPCError(AT_LIMIT, RPCStatusCode.INVALID_ARGUMENT, b"")
        return "sent"

    assert await runs.through_signal_limit("r-1", send) == "sent"
    assert seen == [0, 1, 2]
