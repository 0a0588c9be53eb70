"""Which open approval a decision is for, picked one way for every surface that decides (the
client, the REST routes, MCP's `review`): the named one, or with no name the only one open."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from capstan.core.errors import SteeringError
from capstan.core.steering import ApprovalRequest, pick_request


def request(n: int) -> ApprovalRequest:
    return ApprovalRequest(
        request_id=f"run/1/c{n}",
        call_id=f"c{n}",
        step=1,
        tool="write_file",
        arguments="{}",
        args_hash=f"h{n}",
        reason="asks",
        expires_at=datetime(2026, 12, 3, tzinfo=UTC),
    )


def test_the_only_open_request_needs_no_name() -> None:
    assert pick_request([request(1)], None, "run", "decide") == request(1)


def test_a_named_request_is_picked_among_several() -> None:
    assert pick_request([request(1), request(2)], "run/1/c2", "run", "decide") == request(2)


@pytest.mark.parametrize(
    ("open_requests", "name", "said"),
    [
        ([], None, "name the request to review; open requests: none"),
        (
            [request(1), request(2)],
            None,
            "name the request to review; open requests: run/1/c1, run/1/c2",
        ),
        ([request(1)], "run/1/c9", "no open approval request 'run/1/c9' in run"),
    ],
)
def test_an_ambiguous_or_closed_request_is_a_steering_error(
    open_requests: list[ApprovalRequest], name: str | None, said: str
) -> None:
    with pytest.raises(SteeringError) as caught:
        pick_request(open_requests, name, "run", "review")
    assert str(caught.value) == said
