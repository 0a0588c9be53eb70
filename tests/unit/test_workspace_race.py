"""The file tools against a symlink swapped while they run (time-of-check to time-of-use).

A thread keeps turning a workspace directory into a symlink to a directory outside the
workspace and back, while many reads and writes through that directory run in parallel. Not
one write may land outside and not one read may return outside content, whatever the timing;
and no error the model sees may name an absolute host path.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import BUILTIN_TOOLS
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.activity_io import RunToolInput
from capstan.core.tooling import ToolFailed, ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore

INSIDE = "inside content"
SECRET = "OUTSIDE SECRET"
ROUNDS = 60
PARALLEL = 8
HOLD = 0.0002  # seconds each state lasts: long enough for a whole call to fit in one
_ASIDE = itertools.count()


def _swap_forever(ws: Path, outside: Path, stop: threading.Event) -> None:
    """Alternate `ws/d` between a real directory and a symlink to `outside`."""
    real, stash = ws / "d", ws / ".d-real"
    while not stop.is_set():
        try:
            os.rename(real, stash)
            os.symlink(outside, real)
            time.sleep(HOLD)
            os.unlink(real)
            os.rename(stash, real)
            time.sleep(HOLD)
        except OSError:  # a write made `d` again while it was away
            _put_back(real, stash)


def _put_back(real: Path, stash: Path) -> None:
    """Move whatever took `real`'s name aside and the real directory back."""
    while stash.exists():
        try:
            if real.is_symlink():
                os.unlink(real)
            elif real.exists():
                os.rename(real, real.with_name(f".d-aside-{next(_ASIDE)}"))
            os.rename(stash, real)
        except OSError:
            continue


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "f.txt").write_text(INSIDE)
    (outside / "f.txt").write_text(SECRET)
    yield ws, outside


def _acts(tmp_path: Path, ws: Path) -> ToolActivities:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(ToolRegistry(BUILTIN_TOOLS), content, ws)


def _call(name: str, n: int, **arguments: str) -> RunToolInput:
    return RunToolInput(
        run_id="r",
        step=n,
        call_id=f"c{n}",
        name=name,
        arguments=json.dumps(arguments),
        idempotency_key=f"r/{n}/c{n}",
    )


async def test_swapped_symlink_never_lets_a_call_out(
    tmp_path: Path, layout: tuple[Path, Path]
) -> None:
    ws, outside = layout
    acts = _acts(tmp_path, ws)
    stop = threading.Event()
    swapper = threading.Thread(target=_swap_forever, args=(ws, outside, stop), daemon=True)
    swapper.start()
    outcomes = []
    try:
        for r in range(ROUNDS):
            calls = [_call("read_file", r * 100 + i, path="d/f.txt") for i in range(PARALLEL)]
            calls += [
                _call("write_file", r * 100 + 50 + i, path=f"d/w{r}-{i}.txt", content="w")
                for i in range(PARALLEL)
            ]
            outcomes += await asyncio.gather(*(acts.run_tool(c) for c in calls))
    finally:
        stop.set()
        swapper.join()
    reads = [o.output for o in outcomes if isinstance(o, ToolSucceeded) and o.output != "w"]
    escaped_writes = sorted(p.name for p in outside.iterdir() if p.name != "f.txt")
    leaked = [r for r in reads if isinstance(r, str) and SECRET in r]
    assert (len(escaped_writes), len(leaked)) == (0, 0), (
        f"{len(escaped_writes)} writes landed outside the workspace, "
        f"{len(leaked)} reads returned a file outside it"
    )
    assert any(r == INSIDE for r in reads)  # the race was real: calls did get through
    errors = [o.error for o in outcomes if isinstance(o, ToolFailed)]
    assert not [e for e in errors if str(tmp_path) in e], "an error named a host path"


@pytest.mark.parametrize(
    ("arguments", "tool"),
    [
        ({"path": "missing/f.txt"}, "read_file"),
        ({"path": "d"}, "read_file"),
        ({"path": "d/f.txt/x", "content": "x"}, "write_file"),
        ({"path": "nowhere"}, "list_dir"),
        ({"path": "link/f.txt"}, "read_file"),
        ({"path": "/etc/passwd"}, "read_file"),
    ],
)
async def test_errors_name_only_the_workspace_relative_path(
    tmp_path: Path, layout: tuple[Path, Path], arguments: dict[str, str], tool: str
) -> None:
    ws, outside = layout
    os.symlink(outside, ws / "link")
    outcome = await _acts(tmp_path, ws).run_tool(_call(tool, 1, **arguments))
    assert isinstance(outcome, ToolFailed)
    assert str(tmp_path) not in outcome.error and str(ws) not in outcome.error
    assert arguments["path"] in outcome.error
