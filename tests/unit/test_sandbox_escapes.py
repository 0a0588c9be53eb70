"""The escape corpus: code in the jail tries to get out, and each attempt must fail and say so.

Every call goes through the `run_tool` activity's code (`ToolActivities.run_tool`), as a run's
would, with the run's limits on the call; the jail is real (bubblewrap), so these are skipped,
saying why, on a machine without it (`make system-deps` installs it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import builtin_tools
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.activity_io import RunToolInput
from capstan.core.spec import SandboxLimits
from capstan.core.tooling import ToolFailed, ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from tests.sandbox_helpers import jail_for, jail_workspace, live_with_marker, marker, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the tests below

pytestmark = needs_jail

CANARY = f"canary-{uuid.uuid4().hex}"
FAST = SandboxLimits(wall_seconds=20, cpu_seconds=5, memory_bytes=512 << 20, processes=32)


@pytest.fixture
def tools(jail_workspace: Path, tmp_path: Path) -> ToolActivities:
    data = jail_workspace / ".capstan"  # a data dir inside the workspace: must stay hidden
    (data / "blobs").mkdir(parents=True)
    (data / "blobs" / "secret-blob").write_text(CANARY)
    jail = jail_for(jail_workspace, hidden=(data,))
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(ToolRegistry(builtin_tools(jail)), content, jail_workspace)


async def jailed(
    tools: ToolActivities,
    source: str,
    *,
    python: bool = False,
    limits: SandboxLimits = FAST,
    timeout: float | None = None,
) -> str:
    """The observation of one call, as the model would get it (before fencing and cutting)."""
    name, field = ("run_python", "code") if python else ("run_shell", "command")
    arguments = {field: source, **({"timeout": timeout} if timeout else {})}
    outcome = await tools.run_tool(
        RunToolInput(
            run_id="run",
            step=1,
            call_id=f"c{uuid.uuid4().hex[:6]}",
            name=name,
            arguments=json.dumps(arguments),
            idempotency_key="run/1/c",
            sandbox=limits,
        )
    )
    assert isinstance(outcome, ToolSucceeded), outcome
    return tools.content.resolve(outcome.output)


async def test_reading_etc_shadow_fails(tools: ToolActivities) -> None:
    seen = await jailed(tools, "cat /etc/shadow; ls /etc")
    assert "cat: /etc/shadow: No such file or directory" in seen
    assert "passwd" not in seen and "shadow\n" not in seen


async def test_the_worker_environment_and_its_secrets_are_out_of_reach(
    tools: ToolActivities, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPSTAN_TEST_SECRET", CANARY)  # in the worker's own environment
    worker = os.getpid()
    seen = await jailed(
        tools,
        f"env; echo ppid=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ; "
        f"cat /proc/{worker}/environ; cat /proc/*/environ | tr '\\0' '\\n'; ls /proc",
    )
    assert CANARY not in seen
    assert "ppid=1" in seen  # the jail's own init, whose environment is the allow-list
    assert f"/proc/{worker}/environ: No such file or directory" in seen
    assert "CAPSTAN_IDEMPOTENCY_KEY=run/1/c" in seen


async def test_the_data_dir_inside_the_workspace_is_hidden(
    tools: ToolActivities, jail_workspace: Path
) -> None:
    seen = await jailed(tools, "ls -A .capstan; cat .capstan/blobs/secret-blob; touch .capstan/x")
    assert CANARY not in seen and "No such file or directory" in seen
    assert "Read-only file system" in seen
    assert not (jail_workspace / ".capstan" / "x").exists()


async def test_writing_outside_the_workspace_fails(
    tools: ToolActivities, jail_workspace: Path
) -> None:
    name = f"escaped-{uuid.uuid4().hex}"
    seen = await jailed(
        tools,
        f"for p in ../{name} /{name} /usr/{name} /etc/{name} /workspace/../{name}; do "
        f"echo x > $p || echo refused $p; done; echo y > /tmp/{name} && echo private tmp; "
        f"echo z > {name} && echo inside",
    )
    assert seen.count("refused") == 5 and "Read-only file system" in seen
    for host in (jail_workspace.parent / name, Path("/") / name, Path("/tmp") / name):
        assert not host.exists()
    assert "private tmp" in seen  # /tmp is the call's own, gone with it
    assert (jail_workspace / name).read_text() == "z\n"  # the workspace is where work stays


async def test_symlinks_and_dotdot_lead_nowhere(
    tools: ToolActivities, jail_workspace: Path
) -> None:
    outside = jail_workspace.parent / "outside-secret.txt"
    outside.write_text(CANARY)
    (jail_workspace / "abs").symlink_to(outside)
    (jail_workspace / "rel").symlink_to("../outside-secret.txt")
    (jail_workspace / "shadow").symlink_to("/etc/shadow")
    seen = await jailed(
        tools,
        "cat abs rel shadow ../outside-secret.txt ../../outside-secret.txt; "
        "ln -s / root && ls root/ && cat root/etc/shadow; "
        "ln -s ../../.. up && ls up/; cd ../../..; pwd; ls",
    )
    assert CANARY not in seen
    assert seen.count("No such file or directory") >= 6
    assert "workspace" in seen and "home" not in seen and "root\n" not in seen.split("pwd")[-1]


async def test_no_network_reaches_a_listener_on_the_host(tools: ToolActivities) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('connected')\nexcept OSError as exc:\n    print('refused:', exc)\n"
        )
        seen = await jailed(tools, code, python=True)
        assert "refused:" in seen and "connected" not in seen.replace("refused", "")
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever arrived
        # nor does a run that allows the network: the host's loopback is never the jail's
        # (tests/integration/test_jail_network.py: the Temporal server, link-local, ...)
        opened = await jailed(
            tools, code, python=True, limits=FAST.model_copy(update={"network": True})
        )
        assert "refused:" in opened and "connected" not in opened.replace("refused", "")
        with pytest.raises(TimeoutError):
            listener.accept()


async def test_forking_ten_thousand_processes_fails(tools: ToolActivities) -> None:
    code = (
        "import os, time\nforked = 0\ntry:\n    for _ in range(10_000):\n"
        "        if os.fork() == 0:\n            time.sleep(3)\n            os._exit(0)\n"
        "        forked += 1\nfinally:\n    print('forked', forked)\n"
    )
    seen = await jailed(tools, code, python=True)
    assert "limit reached: processes" in seen
    forked = int(seen.split("forked ")[1].split()[0])
    assert forked < FAST.processes


async def test_allocating_four_gigabytes_fails(tools: ToolActivities) -> None:
    seen = await jailed(tools, "data = bytearray(4 << 30)\nprint('allocated')", python=True)
    assert "limit reached: memory_bytes" in seen and "MemoryError" in seen
    assert "allocated" not in seen


async def test_printing_a_hundred_megabytes_is_cut_and_stopped(tools: ToolActivities) -> None:
    limits = FAST.model_copy(update={"output_bytes": 64 << 10})
    seen = await jailed(tools, "yes 0123456789 | head -c 100000000", limits=limits)
    assert "limit reached: output_bytes" in seen
    assert f"--- output ({64 << 10} bytes, cut at the limit) ---" in seen


async def test_sleeping_past_the_timeout_is_killed(tools: ToolActivities) -> None:
    word = marker()
    seen = await jailed(tools, f"exec -a {word} sleep 600", timeout=1)
    assert "limit reached: wall_seconds (wall time: killed after 1 s)" in seen
    assert live_with_marker(word) == []  # nothing of it is left running


async def test_cpu_and_file_size_limits_stop_the_program(tools: ToolActivities) -> None:
    limits = FAST.model_copy(update={"cpu_seconds": 1, "file_bytes": 1 << 20})
    spin = await jailed(tools, "while True: pass", python=True, limits=limits)
    assert "limit reached: cpu_seconds" in spin and "SIGXCPU" in spin
    big = await jailed(tools, "head -c 5000000 /dev/zero > big; ls -l big", limits=limits)
    assert "limit reached: file_bytes" in big and str(1 << 20) in big


async def test_a_data_task_succeeds(tools: ToolActivities, jail_workspace: Path) -> None:
    (jail_workspace / "a.txt").write_text("1\n2\n3\n")
    (jail_workspace / "logs").mkdir()
    (jail_workspace / "logs" / "b.txt").write_text("x\ny\n")
    (jail_workspace / "linecount.py").write_text(
        "def count(p):\n    return len(p.read_text().splitlines())\n"
    )
    code = (
        "from pathlib import Path\n"
        "from linecount import count  # a module of the workspace\n"
        "counts = {str(p): count(p) for p in sorted(Path('.').rglob('*.txt'))}\n"
        "print(counts, sum(counts.values()))\n"
        "raise SystemExit('then it fails')\n"
    )
    seen = await jailed(tools, code, python=True)
    assert seen.startswith("exit status: 1\n")
    # output and error in the order they happened
    assert seen.endswith("{'a.txt': 3, 'logs/b.txt': 2} 5\nthen it fails\n")
    assert not (jail_workspace / "__pycache__").exists()


async def test_cancellation_kills_the_command(tools: ToolActivities) -> None:
    word = marker()
    call = asyncio.ensure_future(jailed(tools, f"exec -a {word} sleep 600"))
    for _ in range(200):
        if live_with_marker(word):
            break
        await asyncio.sleep(0.05)
    assert live_with_marker(word)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert live_with_marker(word) == []  # killed before the cancellation completed


async def test_a_run_can_forbid_running_an_interrupted_call_again(
    tools: ToolActivities, jail_workspace: Path
) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)  # the worker of attempt 1 was lost
    request = RunToolInput(
        run_id="run",
        step=1,
        call_id="c1",
        name="run_shell",
        arguments=json.dumps({"command": "echo again >> ran.txt"}),
        idempotency_key="run/1/c1",
        sandbox=FAST.model_copy(update={"retryable": False}),
    )
    refused = await env.run(tools.run_tool, request)
    assert isinstance(refused, ToolFailed) and "not run again" in refused.error
    assert not (jail_workspace / "ran.txt").exists()
    allowed = await env.run(tools.run_tool, request.model_copy(update={"sandbox": FAST}))
    assert isinstance(allowed, ToolSucceeded)
    assert (jail_workspace / "ran.txt").read_text() == "again\n"


def test_the_probe_says_whether_the_jail_may_write_the_workspace(jail_workspace: Path) -> None:
    assert jail_for(jail_workspace).writable
    jail_workspace.chmod(0o555)  # the jail's uid owns it but may no longer write it
    try:
        assert not jail_for(jail_workspace).writable
    finally:
        jail_workspace.chmod(0o755)
