"""Scripts of the fake provider that more than one bench process uses."""

from __future__ import annotations

from typing import Any

from capstan.testing.fake_provider import Reply, call, say

__all__ = ["iteration_script"]


def iteration_script(iterations: int) -> Any:
    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if step < iterations - 1:
            return say(
                call("list_dir", path=f"d{step}/a"),
                call("list_dir", path=f"d{step}/b"),
                call("list_dir", path=f"d{step}/c"),
            )
        return say(call("finish", answer="done"))

    return script
