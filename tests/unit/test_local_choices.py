"""The bundled model's argument choices: each call's schema offers only what exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capstan.activities.fence import fence_untrusted
from capstan.activities.providers.base import RenderedCall, RenderedMessage
from capstan.activities.providers.local_choices import narrow_for_call, workspace_listing
from capstan.core.tooling import ToolSpec
from capstan.host.user_code import build_registry

TASK = "Copy the line of notes.txt into a new file summary.txt, then finish with that line."
LINE = "The crane lifts 42 containers an hour."


def tools() -> list[ToolSpec]:
    return build_registry(None).specs(["list_dir", "read_file", "write_file"])


def offered(specs: list[ToolSpec]) -> dict[str, dict[str, Any]]:
    """Tool name -> its properties, as the schema offers them."""
    return {t.name: t.parameters.get("properties", {}) for t in specs}


def called(name: str, result: str, error: bool = False, **arguments: str) -> list[RenderedMessage]:
    call = RenderedCall(id=f"c-{name}", name=name, arguments=json.dumps(arguments))
    text = result if error else fence_untrusted(result, name, call.id)
    return [
        RenderedMessage(role="assistant", content="", tool_calls=(call,)),
        RenderedMessage(role="tool", content=text, tool_call_id=call.id, name=name, is_error=error),
    ]


def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text(LINE + "\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "old.txt").write_text("old\n")
    (tmp_path / ".hidden").write_text("secret\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "notes.txt")
    return tmp_path


def test_the_listing_leaves_out_hidden_files_and_symlinks(tmp_path: Path) -> None:
    assert workspace_listing(workspace(tmp_path)) == (["notes.txt", "sub/old.txt"], ["sub"])
    assert workspace_listing(tmp_path / "missing") == ([], [])


def test_before_reading_the_model_can_only_list_or_read_existing_files(tmp_path: Path) -> None:
    first = [RenderedMessage(role="user", content=TASK)]
    schema = offered(narrow_for_call(tools(), workspace(tmp_path), first))
    assert set(schema) == {"list_dir", "read_file"}  # no line read: nothing to write or answer
    assert schema["read_file"]["path"]["enum"] == ["notes.txt", "sub/old.txt"]
    assert schema["list_dir"]["path"]["enum"] == [".", "sub"]
    assert "type" not in schema["read_file"]["path"]  # an enum of strings, nothing else


def test_after_reading_writes_and_the_answer_are_lines_read(tmp_path: Path) -> None:
    messages = [
        RenderedMessage(role="user", content=TASK),
        *called("list_dir", "notes.txt (40 bytes)", path="."),
        *called("read_file", LINE + "\n", path="notes.txt"),
    ]
    specs = narrow_for_call(tools(), workspace(tmp_path), messages)
    schema = offered(specs)
    assert [t.name for t in specs][-1] == "finish"  # last: a tiny model favours the first
    assert schema["read_file"]["path"]["enum"] == ["sub/old.txt"]  # notes.txt was just read
    assert schema["list_dir"]["path"]["enum"] == ["sub"]
    assert schema["write_file"]["content"]["enum"] == [LINE]  # not the listing's lines
    # notes.txt already holds the line: writing it there would change nothing
    assert schema["write_file"]["path"]["enum"] == ["sub/old.txt", "summary.txt"]
    assert schema["finish"]["answer"]["enum"] == [LINE]


def test_a_refused_finish_is_not_offered_again_at_once(tmp_path: Path) -> None:
    messages = [
        RenderedMessage(role="user", content=TASK),
        *called("read_file", LINE, path="notes.txt"),
        *called("finish", "Error: `finish` was not accepted", error=True, answer=LINE),
    ]
    assert "finish" not in offered(narrow_for_call(tools(), workspace(tmp_path), messages))


def test_a_write_lets_the_model_read_again(tmp_path: Path) -> None:
    messages = [
        RenderedMessage(role="user", content=TASK),
        *called("read_file", LINE, path="notes.txt"),
        *called("write_file", "wrote 40 bytes", path="summary.txt", content=LINE),
    ]
    schema = offered(narrow_for_call(tools(), workspace(tmp_path), messages))
    assert schema["read_file"]["path"]["enum"] == ["notes.txt", "sub/old.txt"]


def test_with_nothing_to_choose_the_tools_stay_as_they_were(tmp_path: Path) -> None:
    specs = [t for t in tools() if t.name != "list_dir"]  # read_file, write_file, finish
    assert narrow_for_call(specs, tmp_path / "empty", []) == specs


def test_by_default_only_paths_are_narrowed(tmp_path: Path) -> None:
    # `CAPSTAN_LOCAL_CHOICES=paths`: the bundled model on a task that is not copying a line
    first = [RenderedMessage(role="user", content=TASK)]
    schema = offered(narrow_for_call(tools(), workspace(tmp_path), first, lines=False))
    assert set(schema) == {"list_dir", "read_file", "write_file", "finish"}
    assert schema["read_file"]["path"]["enum"] == ["notes.txt", "sub/old.txt"]
    assert schema["write_file"]["path"]["enum"] == ["notes.txt", "sub/old.txt", "summary.txt"]
    assert "enum" not in schema["write_file"]["content"]
    assert "enum" not in schema["finish"]["answer"]
