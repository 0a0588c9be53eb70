"""A tenant's jailed code works in its own workspace (issue 26): `run_shell` of one tenant's run
sees neither another tenant's files nor the tenants directory, and the root's run has it masked.
Real bubblewrap, skipped (saying why) without it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import builtin_tools
from capstan.activities.tools.registry import ToolRegistry
from capstan.activities.tools.workspaces import tenants_root
from capstan.core.activity_io import RunToolInput
from capstan.core.spec import SandboxLimits
from capstan.core.tenants import TENANTS_DIR
from capstan.core.tooling import ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from tests.sandbox_helpers import jail_for, jail_workspace, needs_jail

__all__ = ["jail_workspace"]  # the fixture

pytestmark = needs_jail

FAST = SandboxLimits(wall_seconds=20, cpu_seconds=5, memory_bytes=512 << 20, processes=32)


@pytest.fixture
def tools(jail_workspace: Path, tmp_path: Path) -> ToolActivities:
    # as the worker does: the tenants directory exists before the jail is probed, and is masked
    jail = jail_for(jail_workspace, hidden=(tenants_root(jail_workspace),))
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(ToolRegistry(builtin_tools(jail)), content, jail_workspace)


async def _shell(tools: ToolActivities, key: str | None, command: str) -> str:
    outcome = await tools.run_tool(
        RunToolInput(
            run_id="run",
            step=1,
            call_id=uuid.uuid4().hex[:6],
            name="run_shell",
            arguments=json.dumps({"command": command}),
            idempotency_key="run/1/c",
            sandbox=FAST,
            workspace=key,
        )
    )
    assert isinstance(outcome, ToolSucceeded), outcome
    return tools.content.resolve(outcome.output)


async def test_jailed_code_sees_only_its_tenants_workspace(tools: ToolActivities) -> None:
    wrote = await _shell(tools, "acme", "echo acme-secret > notes.txt && cat notes.txt")
    assert "acme-secret" in wrote and "exit status: 0" in wrote
    theirs = await _shell(tools, "other", "ls -a /workspace; cat notes.txt; find / -name notes.txt")
    assert "acme-secret" not in theirs and "No such file" in theirs
    root = await _shell(tools, None, f"ls -a {TENANTS_DIR}; cat {TENANTS_DIR}/acme/*/notes.txt")
    assert "acme-secret" not in root
    thread = await _shell(tools, "acme/threads/t1", "echo t > mine.txt && ls")
    assert "mine.txt" in thread and "notes.txt" not in thread
