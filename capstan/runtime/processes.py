"""Stopping the managed subprocesses (the embedded Temporal server, the local model server)."""

from __future__ import annotations

import contextlib
import subprocess

__all__ = ["stop_process"]


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL. A process already gone is fine."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
