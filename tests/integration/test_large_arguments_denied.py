"""Arguments too large to travel inline (a ref in history, which the gate cannot read) meet the
same deny patterns: `run_tool` checks the worker's and the run's on the resolved text."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.core.spec import TerminalReason, ToolRule
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server

BIG = "x" * 5_000  # well over the inline bound: the arguments travel as a ref


@pytest.mark.parametrize("whose", ["worker", "run"])
async def test_a_large_write_to_a_denied_path_is_denied(
    agent: Agent, tmp_path: Path, workspace: Path, whose: str
) -> None:
    policy = tmp_path / "policy.toml"
    if whose == "worker":
        policy.write_text(
            '[tools.write_file]\ndecision = "allow"\ndeny_arguments = { path = "^secrets/" }\n'
        )
        rules = {}
    else:
        policy.write_text('[tools.write_file]\ndecision = "allow"\n')
        rules = {"write_file": ToolRule(deny_arguments={"path": "^secrets/"})}
    agent.configure(policy_file=policy)
    script = [
        say(call("write_file", path="secrets/key.txt", content=BIG)),
        say(call("write_file", path="notes.txt", content=BIG)),
        say(call("finish", answer="done")),
    ]
    run = await agent.run(script, tool_policy=rules)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert not (workspace / "secrets" / "key.txt").exists()
    assert (workspace / "notes.txt").read_text() == BIG  # a large write elsewhere still runs
    denied = run.messages(1, "tool")[-1]
    assert "policy denies write_file with path matching '^secrets/'" in str(denied)
