"""The diff preview of a pending write judges what it opened, never what a check saw before:
a FIFO, a symlink, a device or a large file at the path is named, not read, and a slow preview
is bounded in time without holding up the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest

from capstan.api import preview
from capstan.api.preview import MAX_PREVIEW_BYTES, bounded, write_preview


def args(path: str, content: str = "new\n") -> str:
    return json.dumps({"path": path, "content": content})


def note(workspace: Path, path: str) -> str:
    p = write_preview("write_file", args(path), workspace)
    assert p is not None and p.diff is None
    return p.note


def test_a_regular_file_is_diffed_and_a_new_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    p = write_preview("write_file", args("a.txt"), tmp_path)
    assert p is not None and p.diff is not None and "-old" in p.diff and "+new" in p.diff
    p = write_preview("write_file", args("b.txt"), tmp_path)
    assert p is not None and p.note == "a new file"


def test_what_is_not_a_regular_file_inside_the_workspace_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # opened for reading without a writer: a blocking open
    assert note(tmp_path, "pipe") == "the path is not a regular file"
    (tmp_path / "dir").mkdir()
    assert note(tmp_path, "dir") == "the path is not a regular file"
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert note(tmp_path, "zero") == "the path leads outside the workspace"
    assert note(tmp_path, "../etc/passwd") == "the path leads outside the workspace"
    (tmp_path / "big").write_bytes(b"x" * (MAX_PREVIEW_BYTES + 1))
    assert note(tmp_path, "big") == "the current file is larger than 512 KiB"
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    assert note(tmp_path, "bin") == "the current file is not UTF-8 text"
    assert note(tmp_path, "a\x00b") == "the path cannot be resolved"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path resolves to a regular file; by the open it is a link (a jailed command raced
    it in): O_NOFOLLOW refuses it instead of reading where it points."""
    (tmp_path / "notes.md").write_text("mine\n")
    real_resolve = Path.resolve

    def racing(self: Path, strict: bool = False) -> Path:
        resolved = real_resolve(self, strict)
        if resolved.name == "notes.md":
            resolved.unlink()
            resolved.symlink_to("/etc/hostname")
        return resolved

    monkeypatch.setattr(Path, "resolve", racing)
    assert note(tmp_path, "notes.md") == "the path is a symbolic link"


async def test_a_slow_preview_is_bounded_and_the_loop_goes_on() -> None:
    release = threading.Event()
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(ticking())
    try:
        assert await bounded(lambda: release.wait(30), seconds=0.3) is None
        assert ticks > 1  # the event loop ran while the preview was stuck
        assert await bounded(lambda: "done") == "done"
    finally:
        release.set()
        await ticker
    preview._threads().submit(lambda: None).result(5)  # the threads are free again
