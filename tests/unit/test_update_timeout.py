"""A validated input Temporal stops waiting for: one clear line, 503 in the API."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from capstan.api.errors import _translate
from capstan.client.runs import CapstanClient, UpdateTimeoutError
from capstan.core.steering import PauseRequest
from capstan.runtime.config import Settings


class _Handle:
    async def execute_update(self, *_: Any, **__: Any) -> Any:
        raise WorkflowUpdateRPCTimeoutOrCancelledError()

    async def signal(self, *_: Any, **__: Any) -> None:
        raise AssertionError("a timed-out update must not be resent as a signal silently")


class _Client:
    def get_workflow_handle(self, *_: Any, **__: Any) -> _Handle:
        return _Handle()


async def test_temporal_giving_up_on_an_update_is_one_clear_line() -> None:
    client = CapstanClient(_Client(), Settings(identity="me"))  # type: ignore[arg-type]
    with pytest.raises(UpdateTimeoutError) as caught:
        await client.steer("r-1", PauseRequest(id="p-1"), checked=True, update_timeout=5)
    message = str(caught.value)
    assert "\n" not in message
    assert "the worker did not answer in time" in message and "'p-1'" in message
    error = _translate(caught.value)
    assert error.status == 503 and error.detail.code == "worker_timeout"
    assert error.headers is not None and "Retry-After" in error.headers
