"""Tenants share nothing (issue 26): the workspace key → directory mapping, hostile keys, thread
ids no tenant can forge, and paths bounded as the OS bounds them."""

from __future__ import annotations

import itertools
import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import builtin_tools
from capstan.activities.tools.registry import ToolRegistry
from capstan.activities.tools.workspace import MAX_DEPTH, Workspace, WorkspaceError
from capstan.activities.tools.workspaces import run_workspace, tenants_root
from capstan.core import tenants
from capstan.core.activity_io import RunToolInput
from capstan.core.tenants import TENANTS_DIR, WORKSPACE_LEAF, TenantError
from capstan.core.tooling import ToolFailed, ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore

HOSTILE_KEYS = [
    "",
    ".",
    "..",
    "../other",
    "acme/../other",
    "/abs",
    "/etc/passwd",
    "acme//x",
    "acme/",
    ".hidden",
    "acme/.workspace",
    "a\0b",
    "a\nb",
    "x" * 600,
    "/".join(["a"] * 9),
    "acme\\..\\other",
    "~root",
]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_a_hostile_key_is_refused_before_any_io(key: str, tmp_path: Path) -> None:
    with pytest.raises(TenantError):
        tenants.workspace_parts(key)
    with pytest.raises(TenantError):
        run_workspace(tmp_path, key, None)
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_keys_map_to_distinct_leaves_below_the_root(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    keys = ["acme", "other", "acme/threads/t1", "other/threads/t1", "acme/threads/t2"]
    dirs = [run_workspace(root, key, None) for key in keys]
    assert len(set(dirs)) == len(dirs)
    for key, found in zip(keys, dirs, strict=True):
        assert found == root / TENANTS_DIR / key / WORKSPACE_LEAF
        assert stat.S_IMODE(found.stat().st_mode) == 0o700
        assert not any(d != found and d.is_relative_to(found) for d in dirs)  # none nested
    passage = root / TENANTS_DIR / "acme"
    assert stat.S_IMODE(passage.stat().st_mode) == 0o711  # the jail's uid passes, never lists
    assert run_workspace(root, None, None) == root  # the default tenant: the root, as before


def test_a_symlink_or_a_foreign_directory_on_the_way_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / TENANTS_DIR).mkdir(parents=True)
    (root / TENANTS_DIR / "acme").symlink_to(elsewhere)
    with pytest.raises(TenantError, match="not a directory"):
        run_workspace(root, "acme", None)
    assert list(elsewhere.iterdir()) == []
    (root / TENANTS_DIR / "other").mkdir(mode=0o777)
    os.chmod(root / TENANTS_DIR / "other", 0o777)  # others may write it: could be swapped
    with pytest.raises(TenantError, match="not the worker's own"):
        run_workspace(root, "other/threads/t", None)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_root_workers_leaf_belongs_to_the_jail_uid(tmp_path: Path) -> None:
    leaf = run_workspace(tmp_path, "acme", (65534, 65534))
    assert (leaf.stat().st_uid, leaf.stat().st_gid) == (65534, 65534)
    assert (tmp_path / TENANTS_DIR).stat().st_uid == 0


def test_thread_ids_are_injective_and_unforgeable() -> None:
    names = ["t1", "support-42", "a.b", "x_y"]
    owners = ["default", "acme", "other", "a.b", "acme@corp"]
    ids = {tenants.thread_workflow_id(t, o): (o, t) for o, t in itertools.product(owners, names)}
    assert len(ids) == len(owners) * len(names)  # no two (tenant, thread) pairs share an id
    assert tenants.thread_workflow_id("support-42", "acme") == "thread-acme:support-42"
    assert tenants.thread_workflow_id("ops7") == "thread-ops7"  # the CLI's threads as before
    # the default tenant cannot name acme's thread, nor a tenant with ':' anyone's
    for thread, tenant in [("acme:support-42", "default"), ("x", "acme:support-42")]:
        with pytest.raises(TenantError):
            tenants.thread_workflow_id(thread, tenant)
    with pytest.raises(TenantError, match="too long"):
        tenants.thread_workflow_id("x" * 195, "acme")
    assert tenants.reserved_run_id("thread-ops7") and not tenants.reserved_run_id("run-1")


def test_workspace_keys_of_tenants_and_threads() -> None:
    assert tenants.workspace_key("default") is None
    assert tenants.workspace_key("default", "ops7") is None
    assert tenants.workspace_key("acme") == "acme"
    assert tenants.workspace_key("acme", "t1") == "acme/threads/t1"
    for tenant in ("a/b", "..", "a:b", " acme", "acme\n"):
        with pytest.raises(TenantError):
            tenants.workspace_key(tenant)


def test_paths_are_bounded_as_the_os_bounds_them(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    deep = "/".join(["d"] * 5000) + "/f.txt"
    with pytest.raises(WorkspaceError, match=r"too long|too deep") as refused:
        ws.write_text(deep, "x")
    assert len(str(refused.value)) < 300 and "\n" not in str(refused.value)
    with pytest.raises(WorkspaceError, match="too deep"):
        ws.write_text("/".join(["d"] * MAX_DEPTH) + "/f.txt", "x")
    with pytest.raises(WorkspaceError, match="too long"):
        ws.write_text("a" * 250 + "/" + "/".join(["b" * 200] * 20), "x")
    with pytest.raises(WorkspaceError, match="longer than 255 bytes"):
        ws.write_text("é" * 128, "x")  # 256 bytes in UTF-8
    assert list(tmp_path.iterdir()) == []  # nothing was made on the way
    ws.write_text("/".join(["d"] * (MAX_DEPTH - 1)) + "/f.txt", "ok")  # the bound itself is fine
    assert ws.read_text("/".join(["d"] * (MAX_DEPTH - 1)) + "/f.txt", 10) == "ok"


def test_the_roots_runs_do_not_see_the_tenants_directory(tmp_path: Path) -> None:
    tenants_root(tmp_path)
    leaf = run_workspace(tmp_path, "acme", None)
    (leaf / "secret.txt").write_text("acme-secret")
    ws = Workspace(tmp_path, hidden=frozenset({TENANTS_DIR}))
    assert [e.name for e in ws.entries(".")] == []
    for path in (f"{TENANTS_DIR}/acme/{WORKSPACE_LEAF}/secret.txt", f"./{TENANTS_DIR}/x"):
        with pytest.raises(FileNotFoundError):
            ws.read_text(path, 100)
        with pytest.raises(FileNotFoundError):
            ws.write_text(path, "x")
    with pytest.raises(FileNotFoundError):
        ws.entries(TENANTS_DIR)


@pytest.fixture
def tools(tmp_path: Path) -> ToolActivities:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(ToolRegistry(builtin_tools()), content, tmp_path / "ws")


async def _call(tools: ToolActivities, name: str, key: str | None, **args: str) -> str:
    outcome = await tools.run_tool(
        RunToolInput(
            run_id="run",
            step=1,
            call_id=uuid.uuid4().hex[:6],
            name=name,
            arguments=json.dumps(args),
            idempotency_key="run/1/c",
            workspace=key,
        )
    )
    if isinstance(outcome, ToolFailed):
        return f"FAILED {outcome.error}"
    assert isinstance(outcome, ToolSucceeded)
    return tools.content.resolve(outcome.output)


async def test_a_tenants_file_is_not_in_another_tenants_workspace(tools: ToolActivities) -> None:
    wrote = await _call(tools, "write_file", "acme", path="notes.txt", content="acme-secret")
    assert wrote.startswith("wrote")
    assert await _call(tools, "read_file", "acme", path="notes.txt") == "acme-secret"
    for key in ("other", "acme/threads/t1", None):  # another tenant, a thread, the root
        seen = await _call(tools, "read_file", key, path="notes.txt")
        assert seen.startswith("FAILED FileNotFoundError") and "acme-secret" not in seen
        listed = await _call(tools, "list_dir", key, path=".")
        assert "notes.txt" not in listed and TENANTS_DIR not in listed
    hostile = await _call(tools, "read_file", "../acme", path="notes.txt")
    assert hostile.startswith("FAILED TenantError") and "acme-secret" not in hostile


async def test_a_deep_write_is_a_one_line_tool_error(tools: ToolActivities) -> None:
    seen = await _call(tools, "write_file", "acme", path="d/" * 3000 + "f", content="x")
    assert seen.startswith("FAILED WorkspaceError") and "too" in seen
    assert "\n" not in seen and len(seen) < 300


def test_the_api_names_tenants_as_the_core_does() -> None:
    from capstan.api import tenancy

    assert (tenancy.TENANT_MEMO, tenancy.DEFAULT_TENANT) == (
        tenants.TENANT_MEMO,
        tenants.DEFAULT_TENANT,
    )


def test_a_runs_workspace_as_readers_find_it() -> None:
    assert tenants.run_workspace_key("default", "thread-ops7") is None
    assert tenants.run_workspace_key("acme", "run-1/helper-2.0") == "acme"
    assert tenants.run_workspace_key("acme", "thread-acme:t1/helper-2.0") == "acme/threads/t1"
    assert tenants.workspace_subdir(None) == ""
    assert tenants.workspace_subdir("acme") == f"{TENANTS_DIR}/acme/{WORKSPACE_LEAF}"
