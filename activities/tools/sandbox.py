"""`run_shell` and `run_python`: code run in the bubblewrap jail of `jail.py`, bounded, killable.

One call: the script reaches the jail through an anonymous in-memory file; bwrap starts in a
session and process group of its own; the output (stdout and stderr merged, in order) is read up
to `sandbox.output_bytes`. At the wall-time deadline, at the output cap, and when the activity is
cancelled (delivered with a heartbeat: `run_tool` heartbeats every second while a tool runs),
bwrap's process group is killed, and everything inside dies with it: it is all in bwrap's PID
namespace, and `--die-with-parent` kills that too when the worker itself dies. The observation
starts with the exit status and, when the call reached one, the limit.

Calls may run more than once: when a worker is lost mid-call, Temporal runs the call again, with
the same `CAPSTAN_IDEMPOTENCY_KEY` in its environment; commands should be idempotent. A run whose
`sandbox.retryable` is false gets a report instead of a second run.

Never runs code outside the jail: these tools exist only for a `Jail` that `probe_jail` built.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
from dataclasses import dataclass

from temporalio import activity

from capstan.activities.tools.jail import Jail, Program, script_fd, spawn_identity
from capstan.activities.tools.registry import ToolContext, ToolFunction, tool
from capstan.core.spec import SandboxLimits

__all__ = [
    "ACTIVITY_SECONDS",
    "JailRun",
    "SandboxRerunError",
    "describe",
    "reached",
    "run_jailed",
    "sandbox_tools",
]

#: start-to-close of a sandbox call: the wall limit of a call is kept below it
ACTIVITY_SECONDS = 3600.0
_MARGIN = 5.0  # seconds kept, below the activity's deadline, to kill and report
_CHUNK = 1 << 16
_TAIL = 4096  # bytes of output searched for a limit's error message
_REAP_SECONDS = 5.0  # a killed jail's pipe ends at once; never wait on it for long


class SandboxRerunError(RuntimeError):
    """A call interrupted by a lost worker, in a run that does not allow running it again."""


@dataclass(frozen=True)
class JailRun:
    """What one jailed call did: its exit status, its output, and what the sandbox stopped."""

    status: int | None
    output: bytes
    stopped: str | None  # "wall_seconds" or "output_bytes" when the sandbox killed the call
    cut: bool = False


async def run_jailed(
    jail: Jail, limits: SandboxLimits, program: Program, source: str, *, key: str, wall: float
) -> JailRun:
    """Run `source` in the jail for at most `wall` seconds; kill it all on any way out."""
    with script_fd(source) as fd:
        proc = await asyncio.create_subprocess_exec(
            *jail.argv(limits, fd, program),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=jail.environment(key),
            pass_fds=(fd,),
            start_new_session=True,
            **spawn_identity(jail, limits),
        )
    output = bytearray()
    stopped = None
    try:
        if not await asyncio.wait_for(_drain(proc, output, limits.output_bytes), wall):
            stopped = "output_bytes"
    except TimeoutError:
        stopped = "wall_seconds"
    finally:
        _kill(proc)  # also on cancellation: nothing of the call outlives it
        await _reap(proc)
    status = None if stopped else proc.returncode
    return JailRun(status, bytes(output), stopped, cut=stopped == "output_bytes")


async def _drain(proc: asyncio.subprocess.Process, into: bytearray, cap: int) -> bool:
    """Read the output until the jail ends (True) or the cap is passed (False)."""
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(_CHUNK):
        room = cap - len(into)
        into += chunk[:room]
        if len(chunk) > room:
            return False
    await proc.wait()
    return True


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Read what is left of the output (asyncio's `wait` also waits for the pipe's end)."""
    assert proc.stdout is not None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_REAP_SECONDS):
            while await proc.stdout.read(_CHUNK):
                pass
            await proc.wait()


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


#: exit statuses of a jail whose program a limit's signal killed (the shell reports 128 + n)
_SIGNALLED = {128 + signal.SIGXCPU: "cpu_seconds", 128 + signal.SIGXFSZ: "file_bytes"}
#: what programs print when a limit made something fail, searched in the output's tail
_MESSAGES = (
    ("memory_bytes", ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")),
    ("processes", ("Resource temporarily unavailable", "Cannot fork", "fork: retry")),
    ("file_bytes", ("File too large",)),
)


#: bash's report of a command a limit's signal killed (the script may go on and exit 0)
_BASH_KILLED = re.compile(r"line \d+: +\d+ (CPU time|File size) limit exceeded")


def reached(run: JailRun) -> str | None:
    """The limit a call reached (a `SandboxLimits` field name), if it reached one.

    Certain for the sandbox's own stops and for a program killed by SIGXCPU or SIGXFSZ; read
    from the error messages programs print for the limits that make a call fail instead.
    """
    if run.stopped is not None:
        return run.stopped
    if run.status in _SIGNALLED:
        return _SIGNALLED[run.status]
    tail = run.output[-_TAIL:].decode("utf-8", errors="replace")
    if killed := _BASH_KILLED.search(tail):
        return "cpu_seconds" if killed.group(1) == "CPU time" else "file_bytes"
    if not run.status:
        return None
    for limit, messages in _MESSAGES:
        if any(message in tail for message in messages):
            return limit
    return None


def _explain(limit: str, limits: SandboxLimits, wall: float) -> str:
    mib = limits.memory_bytes >> 20
    return {
        "wall_seconds": f"wall time: killed after {wall:g} s",
        "output_bytes": f"output: more than {limits.output_bytes} bytes; killed",
        "cpu_seconds": f"CPU time: {limits.cpu_seconds} s used; killed",
        "file_bytes": f"file size: a file may not exceed {limits.file_bytes} bytes",
        "memory_bytes": f"memory: an allocation failed at the {mib} MiB address-space limit",
        "processes": f"processes: at most {limits.processes} at once; a fork failed",
    }[limit]


def describe(run: JailRun, limits: SandboxLimits, wall: float) -> str:
    """The observation: exit status, the limit reached (if any), then the output."""
    if run.stopped is not None:
        status = "none (killed by the sandbox)"
    elif run.status is not None and run.status > 128:
        status = f"{run.status} (killed by {_signal_name(run.status - 128)})"
    else:
        status = str(run.status)
    lines = [f"exit status: {status}"]
    limit = reached(run)
    if limit is not None:
        lines.append(f"limit reached: {limit} ({_explain(limit, limits, wall)})")
    cut = ", cut at the limit" if run.cut else ""
    lines.append(f"--- output ({len(run.output)} bytes{cut}) ---")
    lines.append(run.output.decode("utf-8", errors="replace") or "(no output)")
    return "\n".join(lines)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wall(limits: SandboxLimits, timeout: float | None) -> float:
    """The call's deadline: its `timeout`, at most the run's limit and the activity's own."""
    wall = limits.wall_seconds
    if timeout is not None and timeout > 0:
        wall = min(wall, timeout)
    if activity.in_activity():
        deadline = activity.info().start_to_close_timeout
        if deadline is not None:
            wall = min(wall, max(deadline.total_seconds() - _MARGIN, 1.0))
    return wall


def _refuse_rerun(limits: SandboxLimits, key: str) -> None:
    if not limits.retryable and activity.in_activity() and activity.info().attempt > 1:
        raise SandboxRerunError(
            f"call {key} was interrupted (its worker was lost) and may have run partly; it is "
            "not run again because this run sets sandbox.retryable = false"
        )


async def _call(
    jail: Jail, ctx: ToolContext, program: Program, source: str, timeout: float | None
) -> str:
    limits = ctx.sandbox or SandboxLimits()
    _refuse_rerun(limits, ctx.idempotency_key)
    if ctx.workspace != jail.workspace:  # a tenant's or thread's own, holding nothing else
        jail = dataclasses.replace(jail, workspace=ctx.workspace, masks=())
    wall = _wall(limits, timeout)
    ran = await run_jailed(jail, limits, program, source, key=ctx.idempotency_key, wall=wall)
    return describe(ran, limits, wall)


def sandbox_tools(jail: Jail) -> list[ToolFunction]:
    """`run_shell` (and `run_python` when the jail has a python3) bound to this worker's jail."""

    @tool(name="run_shell", untrusted_output=True, timeout_seconds=ACTIVITY_SECONDS)
    async def run_shell(ctx: ToolContext, command: str, timeout: float | None = None) -> str:
        """Run a bash script in a sandbox; returns its exit status and output.

        The working directory is the workspace (/workspace), the only place whose changes are
        kept; /tmp is private to the call. There is no network unless the run allows it. Wall
        time, CPU time, memory, processes, file size and output are limited: a command that
        reaches a limit is stopped and the result names the limit. A call can run again after
        a worker failure (with the same CAPSTAN_IDEMPOTENCY_KEY in its environment), so make
        commands idempotent.

        Args:
            command: The script to run (bash).
            timeout: Seconds before it is killed; at most the run's limit (default: the limit).
        """
        return await _call(jail, ctx, "shell", command, timeout)

    @tool(name="run_python", untrusted_output=True, timeout_seconds=ACTIVITY_SECONDS)
    async def run_python(ctx: ToolContext, code: str, timeout: float | None = None) -> str:
        """Run a Python 3 program in a sandbox; returns its exit status and output.

        The working directory is the workspace (/workspace), the only place whose changes are
        kept; /tmp is private to the call. Only the standard library and the system's packages
        are installed; there is no network unless the run allows it. Wall time, CPU time,
        memory, processes, file size and output are limited: a program that reaches a limit is
        stopped and the result names the limit. A call can run again after a worker failure
        (with the same CAPSTAN_IDEMPOTENCY_KEY in os.environ), so make programs idempotent.

        Args:
            code: The program's source.
            timeout: Seconds before it is killed; at most the run's limit (default: the limit).
        """
        return await _call(jail, ctx, "python", code, timeout)

    return [run_shell, run_python] if jail.python else [run_shell]
