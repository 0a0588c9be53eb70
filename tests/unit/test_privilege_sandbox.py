"""The worker's sandbox limits are ceilings (`capstan.core.privilege.clamp_sandbox`): what a run
asks above them is lowered to them where a call's jail is built (`ToolActivities.run_tool`), and
a jail has a network only when the worker allows one (`CAPSTAN_SANDBOX_NETWORK`). The last test
runs a real jail (bubblewrap) from inside which a run asking for the network tries to reach a
server on the host's loopback, as the attack on issue 26 did.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import builtin_tools
from capstan.activities.tools.registry import ToolContext, ToolRegistry, tool
from capstan.core import privilege
from capstan.core.activity_io import RunToolInput
from capstan.core.spec import SandboxLimits
from capstan.core.tooling import ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.config import ConfigError, Settings
from tests.sandbox_helpers import jail_for, jail_workspace, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the test below

CEILING = SandboxLimits()
RAISED: dict[str, Any] = {
    "wall_seconds": 3600.0,
    "cpu_seconds": 3600,
    "memory_bytes": 64 << 30,
    "processes": 100_000,
    "file_bytes": 1 << 40,
    "output_bytes": 1 << 30,
    "tmp_bytes": 1 << 40,
}


LOWERED: dict[str, Any] = {
    "wall_seconds": 1.0,
    "cpu_seconds": 1,
    "memory_bytes": 32 << 20,
    "processes": 4,
    "file_bytes": 1,
    "output_bytes": 1024,
    "tmp_bytes": 1 << 20,
}


def test_every_limit_has_a_ceiling() -> None:
    """A limit added to `SandboxLimits` later must be capped too (or it fails here)."""
    assert set(RAISED) == set(LOWERED) == set(SandboxLimits.model_fields) - {"network", "retryable"}
    assert privilege.clamp_sandbox(SandboxLimits(**RAISED), CEILING) == CEILING


@pytest.mark.parametrize("field", sorted(RAISED))
def test_a_run_asks_at_most_the_workers_limit(field: str) -> None:
    raised = SandboxLimits(**{field: RAISED[field]})
    assert privilege.clamp_sandbox(raised, CEILING) == CEILING
    lowered = SandboxLimits(**{field: LOWERED[field]})
    assert privilege.clamp_sandbox(lowered, CEILING) == lowered  # narrowing is kept
    wider = CEILING.model_copy(update={field: RAISED[field]})
    assert privilege.clamp_sandbox(raised, wider) == raised  # a worker may allow more


def test_the_network_needs_the_worker_too() -> None:
    asked = SandboxLimits(network=True, retryable=False)
    assert privilege.clamp_sandbox(asked, CEILING) == SandboxLimits(retryable=False)
    assert privilege.clamp_sandbox(asked, SandboxLimits(network=True)).network
    assert not privilege.clamp_sandbox(SandboxLimits(), SandboxLimits(network=True)).network


def test_the_workers_ceiling_is_a_setting() -> None:
    assert Settings.from_env({}).sandbox_ceiling == SandboxLimits()
    env = {
        "CAPSTAN_SANDBOX_LIMITS": json.dumps({"memory_bytes": 4 << 30}),
        "CAPSTAN_SANDBOX_NETWORK": "1",
    }
    assert Settings.from_env(env).sandbox_ceiling == SandboxLimits(
        memory_bytes=4 << 30, network=True
    )
    for bad in ('{"network": true}', '{"memory": 1}', "4G"):
        with pytest.raises(ConfigError, match="CAPSTAN_SANDBOX_LIMITS"):
            Settings.from_env({"CAPSTAN_SANDBOX_LIMITS": bad})


def _call(limits: SandboxLimits | None) -> RunToolInput:
    return RunToolInput(
        run_id="r",
        step=1,
        call_id="c",
        name="run_shell",
        arguments='{"command": "x"}',
        idempotency_key="r/1/c",
        sandbox=limits,
    )


def _capturing() -> tuple[ToolRegistry, list[SandboxLimits | None]]:
    seen: list[SandboxLimits | None] = []

    @tool(name="run_shell")
    async def run_shell(ctx: ToolContext, command: str) -> str:
        seen.append(ctx.sandbox)
        return "ok"

    return ToolRegistry([run_shell]), seen


@pytest.mark.parametrize(
    ("ceiling", "expected"),
    [
        (None, SandboxLimits()),
        (SandboxLimits(memory_bytes=2 << 30), SandboxLimits(memory_bytes=2 << 30)),
        (SandboxLimits(network=True), SandboxLimits(network=True)),
    ],
)
async def test_the_jail_gets_what_the_run_asks_within_the_worker(
    tmp_path: Path, ceiling: SandboxLimits | None, expected: SandboxLimits
) -> None:
    registry, seen = _capturing()
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    tools = ToolActivities(registry, content, tmp_path / "ws", sandbox_ceiling=ceiling)
    asked = SandboxLimits(network=True, **RAISED)
    assert isinstance(await tools.run_tool(_call(asked)), ToolSucceeded)
    assert isinstance(await tools.run_tool(_call(None)), ToolSucceeded)
    assert seen[0] == expected
    assert seen[1] == privilege.clamp_sandbox(SandboxLimits(), expected)  # never above the worker


@needs_jail
async def test_a_run_asking_for_the_network_gets_none_unless_the_worker_allows_it(
    jail_workspace: Path, tmp_path: Path
) -> None:
    """The attack: a run without the worker's leave sets `sandbox.network = true` and connects,
    from inside the jail, to a server on the host's loopback (there: the Temporal server)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
        registry = ToolRegistry(builtin_tools(jail_for(jail_workspace)))
        tools = ToolActivities(registry, content, jail_workspace)  # the default: no network
        command = (
            "echo interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1);"
            f"if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null;"
            " then echo HOST-REACHED; else echo HOST-UNREACHABLE; fi"
        )
        asked = SandboxLimits(network=True, wall_seconds=20)
        request = _call(asked).model_copy(update={"arguments": json.dumps({"command": command})})
        outcome = await asyncio.wait_for(tools.run_tool(request), 60)
    assert isinstance(outcome, ToolSucceeded), outcome
    seen = content.resolve(outcome.output)
    assert "HOST-UNREACHABLE" in seen and "HOST-REACHED" not in seen, seen
    (listed,) = [line for line in seen.splitlines() if line.startswith("interfaces:")]
    assert listed.split()[1:] == ["lo"], seen  # a network namespace of its own
