"""A batch job is not a loop: 60 reads of different files of one size run to the end.

The similar-results breaker used to judge results by length alone and ended such a run
`circuit_breaker` at step 22. It judges by content now (`capstan.core.resemblance`); the pure
loop's cases, loops included, are in tests/unit/test_breaker_similarity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.unit.test_breaker_similarity import document

pytestmark = pytest.mark.server

FILES = 60


async def test_sixty_reads_of_different_files_complete(agent: Agent, workspace: Path) -> None:
    (workspace / "data").mkdir()
    for i in range(FILES):
        (workspace / "data" / f"part-{i:03d}.txt").write_text(document(i))
    script = [say(call("read_file", path=f"data/part-{i:03d}.txt")) for i in range(FILES)]
    script.append(say(call("finish", answer=f"read {FILES} files")))
    run = await agent.run(script, task="summarise every part", max_steps=FILES + 5, timeout=180)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    assert run.result.output == f"read {FILES} files"
    assert run.result.steps == FILES + 1
    sent = [str(m.get("content")) for r in run.requests for m in r["messages"]]
    assert not any("going in circles" in text for text in sent)
    # the model saw every file's own content
    last = run.requests[-1]["messages"]
    assert sum(1 for m in last if m["role"] == "tool") == FILES
    assert all(document(i)[-40:] in str(last) for i in range(FILES))
