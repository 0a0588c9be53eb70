"""Tool schemas from signatures, the workspace fence, the run_tool activity's outcomes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import BUILTIN_TOOLS, FINISH_SPEC
from capstan.activities.tools.registry import ToolContext, ToolRegistry, tool
from capstan.activities.tools.workspace import Workspace, WorkspaceError, workspace_parts
from capstan.core.activity_io import ListToolsInput, RunToolInput
from capstan.core.content import BlobRef
from capstan.core.tooling import ToolCatalog, ToolFailed, ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from tests import sample_tools


@tool(read_only=True, timeout_seconds=5)
async def search(ctx: ToolContext, query: str, limit: int = 3) -> str:
    """Search the notes.

    Args:
        query: What to look for.
        limit: How many hits to return.
    """
    return f"{query}:{limit}:{ctx.idempotency_key}"


def test_schema_comes_from_signature_and_docstring() -> None:
    spec = ToolRegistry([search]).get("search").spec()  # type: ignore[union-attr]
    assert spec.description == "Search the notes."
    props = spec.parameters["properties"]
    assert set(props) == {"query", "limit"}  # the context is injected, not exposed
    assert props["query"]["description"] == "What to look for."
    assert props["limit"]["default"] == 3 and spec.parameters["required"] == ["query"]
    assert spec.read_only and spec.timeout_seconds == 5


def test_a_tool_builds_its_spec_once() -> None:
    found = ToolRegistry([search]).get("search")
    assert found is not None and found.spec() is found.spec()  # every run lists its tools


def test_registry_rejects_duplicates_and_sync_functions() -> None:
    with pytest.raises(ValueError, match="twice"):
        ToolRegistry([search, search])

    def sync_tool(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="async"):
        ToolRegistry([sync_tool])  # type: ignore[list-item]


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "~/x", "a\0b"])
def test_workspace_refuses_escapes(tmp_path: Path, bad: str) -> None:
    with pytest.raises(WorkspaceError):
        workspace_parts(bad)
    with pytest.raises(WorkspaceError):
        Workspace(tmp_path).write_text(bad, "x")


def test_workspace_follows_no_symlink(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    os.symlink(tmp_path, ws / "out")
    os.symlink("sub", ws / "inner")  # even a link that stays inside is not followed
    workspace = Workspace(ws)
    for path in ("out/secret", "out/new/secret", "inner/file.txt", "out"):
        with pytest.raises(WorkspaceError, match="symlink"):
            workspace.write_text(path, "x")
        with pytest.raises(WorkspaceError, match="symlink"):
            workspace.read_text(path, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]
    assert workspace.write_text("sub/file.txt", "hé") == 3
    assert workspace.read_text("./sub//file.txt", 10) == "hé"
    kinds = {e.name: e.kind for e in workspace.entries(".")}
    assert kinds == {"inner": "symlink", "out": "symlink", "sub": "dir"}


def test_workspace_refuses_special_and_hard_linked_files(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(outside, ws / "hard")
    os.mkfifo(ws / "fifo")
    workspace = Workspace(ws)
    with pytest.raises(WorkspaceError, match="hard link"):
        workspace.write_text("hard", "changed")
    assert outside.read_text() == "keep"
    for path in ("fifo", "."):  # neither hangs nor reads a non-file
        with pytest.raises(WorkspaceError):
            workspace.read_text(path, 10)
    with pytest.raises(WorkspaceError, match="not a regular file"):
        workspace.write_text("fifo", "x")


@pytest.fixture
def activities(tmp_path: Path) -> ToolActivities:
    registry = ToolRegistry([*BUILTIN_TOOLS, search, *sample_tools.tools])
    registry.add_spec(FINISH_SPEC)
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(registry, content, tmp_path / "ws")


def request(name: str, arguments: str, call_id: str = "c1") -> RunToolInput:
    return RunToolInput(
        run_id="r",
        step=2,
        call_id=call_id,
        name=name,
        arguments=arguments,
        idempotency_key=f"r/2/{call_id}",
    )


async def test_run_tool_outcomes(activities: ToolActivities) -> None:
    ok = await activities.run_tool(request("search", '{"query": "q"}'))
    assert isinstance(ok, ToolSucceeded) and ok.output == "q:3:r/2/c1"
    unknown = await activities.run_tool(request("nope", "{}"))
    assert isinstance(unknown, ToolFailed) and unknown.failure == "unknown_tool"
    bad_json = await activities.run_tool(request("search", "{oops"))
    assert isinstance(bad_json, ToolFailed) and "not valid JSON" in bad_json.error
    wrong = await activities.run_tool(request("search", '{"query": 1, "extra": 2}'))
    assert isinstance(wrong, ToolFailed) and wrong.failure == "invalid_arguments"
    assert "query" in wrong.error and "extra" in wrong.error
    boom = await activities.run_tool(request("explode", '{"reason": "kaput"}'))
    assert isinstance(boom, ToolFailed) and boom.error == "RuntimeError: kaput"


async def test_large_results_become_refs_and_read_result_pages(activities: ToolActivities) -> None:
    big = await activities.run_tool(request("big_output", '{"size": 10000}'))
    assert isinstance(big, ToolSucceeded) and isinstance(big.output, BlobRef)
    assert big.output.size == 10000 and big.output.tokens > 0
    args = json.dumps({"ref": big.output.sha256, "offset": 9990, "limit": 50})
    page = await activities.run_tool(request("read_result", args, "c2"))
    assert isinstance(page, ToolSucceeded) and isinstance(page.output, str)
    assert page.output.startswith("[characters 9990-10000 of 10000.]")


async def test_file_tools_round_trip(activities: ToolActivities) -> None:
    await activities.run_tool(request("write_file", '{"path": "d/f.txt", "content": "hé"}'))
    read = await activities.run_tool(request("read_file", '{"path": "d/f.txt"}'))
    assert isinstance(read, ToolSucceeded) and read.output == "hé"
    listing = await activities.run_tool(request("list_dir", "{}"))
    assert isinstance(listing, ToolSucceeded) and listing.output == "d/"


async def test_list_dir_shows_hostile_names_escaped_and_links_unfollowed(
    activities: ToolActivities, tmp_path: Path
) -> None:
    (activities.workspace / "x\nfake.txt (9 bytes)").write_text("ab")
    (activities.workspace / "sub").mkdir()
    os.symlink(tmp_path, activities.workspace / "link")
    listing = await activities.run_tool(request("list_dir", "{}"))
    assert isinstance(listing, ToolSucceeded)
    assert listing.output == (
        "sub/\nlink (symlink, not followed)\n'x\\nfake.txt (9 bytes)' (2 bytes)"
    )


async def test_list_tools_filters_but_always_offers_finish(activities: ToolActivities) -> None:
    catalog = await activities.list_tools(ListToolsInput(allowed=("read_file", "search")))
    assert catalog.names == ("finish", "read_file", "search")
    assert catalog.timeouts == {"search": 5}
    specs = json.loads(activities.content.read_bytes(catalog.specs_ref.sha256))
    assert [s["name"] for s in specs] == ["finish", "read_file", "search"]


async def test_worker_policy_file_reaches_the_catalog(tmp_path: Path) -> None:
    from capstan.host.policy_file import load_policy

    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(
        '[tools.list_dir]\ndecision = "deny"\n\n'
        '[tools.write_file]\ndecision = "ask"\ndeny_arguments = { path = "^secrets/" }\n'
    )
    rules = load_policy(policy_file)
    registry = ToolRegistry(BUILTIN_TOOLS)
    acts = ToolActivities(registry, ContentStore(LocalBlobStore(tmp_path / "b")), tmp_path, rules)
    catalog = await acts.list_tools(ListToolsInput())
    assert catalog.tools["list_dir"].policy == "deny"
    assert catalog.tools["write_file"].deny_arguments == {"path": "^secrets/"}
    assert catalog.tools["read_file"].untrusted_output and catalog.tools["read_file"].read_only
    assert catalog.tools["write_file"].parameters["required"] == ["path", "content"]
    assert load_policy(None) == {}


async def test_the_listing_says_which_requests_the_worker_notifies(tmp_path: Path) -> None:
    """A worker without webhooks lists `notify=()`, so its runs start no `notify_request`; a
    catalog recorded before the field reads as None (notify every kind, as runs then did)."""
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    registry = ToolRegistry([*BUILTIN_TOOLS])
    quiet = ToolActivities(registry, content, tmp_path / "ws")
    assert (await quiet.list_tools(ListToolsInput())).notify == ()
    hooked = ToolActivities(registry, content, tmp_path / "ws", notify=("approval",))
    catalog = await hooked.list_tools(ListToolsInput())
    assert catalog.notify == ("approval",)
    older = catalog.model_dump(mode="json")
    del older["notify"]
    assert ToolCatalog.model_validate(older).notify is None
