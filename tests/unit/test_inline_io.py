"""Small local work runs in place, large or remote work in a thread (`capstan.activities.inline`).

Each test counts the thread hops (`asyncio.to_thread` in the module under test) and checks the
answer is the same either way: a small file, directory or model step makes none; a large one,
a ref in the step, or a blob store across a network makes its hop as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.activities.inline import INLINE_BYTES, INLINE_ENTRIES, small_messages
from capstan.activities.model import ModelActivities
from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import BUILTIN_TOOLS
from capstan.activities.tools.registry import ToolRegistry
from capstan.activities.tools.workspace import Workspace
from capstan.core.activity_io import CallModelInput, RunToolInput
from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall
from capstan.core.tooling import ToolSucceeded
from capstan.runtime.blob_cache import CachedBlobStore
from capstan.runtime.blobstore import ContentStore, LocalBlobStore


class Hops:
    """Records the calls of `asyncio.to_thread` by what they run, and still makes them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def of(self, owner: str) -> list[str]:
        """The hops to methods of the class `owner`, by method name."""
        return [c.removeprefix(f"{owner}.") for c in self.calls if c.startswith(f"{owner}.")]


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Hops:
    found = Hops()
    real = asyncio.to_thread

    async def counted(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        found.calls.append(getattr(func, "__qualname__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    return found


# -- the workspace's bounded calls ----------------------------------------------------------


def test_entries_within_a_bound_or_none(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    workspace = Workspace(tmp_path)
    assert len(workspace.entries(".", at_most=5) or []) == 5
    assert workspace.entries(".", at_most=4) is None
    assert len(workspace.entries(".")) == 5


def test_read_text_within_a_bound_or_none(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("hello")
    workspace = Workspace(tmp_path)
    assert workspace.read_text("f.txt", 100, at_most=5) == "hello"
    assert workspace.read_text("f.txt", 100, at_most=4) is None
    assert workspace.read_text("f.txt", 3) == "hel"


def test_a_bounded_call_refuses_as_the_whole_call_does(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    workspace = Workspace(tmp_path)
    with pytest.raises(ValueError, match="symlink"):
        workspace.entries("link", at_most=10)
    with pytest.raises(FileNotFoundError):
        workspace.read_text("missing.txt", 10, at_most=10)


# -- the file tools ---------------------------------------------------------------------------


@pytest.fixture
def tools(tmp_path: Path) -> ToolActivities:
    (tmp_path / "ws").mkdir()
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ToolActivities(ToolRegistry(BUILTIN_TOOLS), content, tmp_path / "ws")


async def _run(tools: ToolActivities, name: str, **arguments: Any) -> str:
    request = RunToolInput(
        run_id="r", step=1, call_id="c", name=name, arguments=json.dumps(arguments),
        idempotency_key="r/1/c",
    )  # fmt: skip
    outcome = await tools.run_tool(request)
    assert isinstance(outcome, ToolSucceeded), outcome
    return tools.content.resolve(outcome.output)


async def test_small_files_and_directories_make_no_thread_hop(
    tools: ToolActivities, hops: Hops
) -> None:
    assert await _run(tools, "write_file", path="d/a.txt", content="hello") == (
        "wrote 5 bytes to d/a.txt"
    )
    assert await _run(tools, "read_file", path="d/a.txt") == "hello"
    assert await _run(tools, "list_dir", path="d") == "a.txt (5 bytes)"
    assert hops.of("Workspace") == []


async def test_large_files_and_directories_are_read_in_a_thread(
    tools: ToolActivities, hops: Hops, tmp_path: Path
) -> None:
    big = "y" * (INLINE_BYTES + 1)
    await _run(tools, "write_file", path="big.txt", content=big)
    (tmp_path / "ws" / "huge.txt").write_text("z" * (INLINE_BYTES + 1))
    read = await _run(tools, "read_file", path="huge.txt")
    assert read == "z" * (INLINE_BYTES + 1)
    many = tmp_path / "ws" / "many"
    many.mkdir()
    for i in range(INLINE_ENTRIES + 1):
        (many / f"f{i:04d}").touch()
    listing = await _run(tools, "list_dir", path="many")
    assert len(listing.splitlines()) == INLINE_ENTRIES + 1
    # a small write over a large file: truncating it is not small
    assert await _run(tools, "write_file", path="huge.txt", content="small") == (
        "wrote 5 bytes to huge.txt"
    )
    assert (tmp_path / "ws" / "huge.txt").read_text() == "small"
    assert hops.of("Workspace") == ["write_text", "read_text", "entries", "write_text"]


# -- the model call ---------------------------------------------------------------------------


def test_small_messages_counts_every_text_and_refuses_refs() -> None:
    ref = BlobRef(sha256="a" * 64, size=10)
    quarter = INLINE_BYTES // 4
    assert small_messages([Message(role="user", content="x" * quarter)])
    assert not small_messages([Message(role="user", content="x" * quarter)], chars=1)
    assert not small_messages([Message(role="tool", content=ref)])
    call = ToolCall(id="c", name="t", arguments="x" * (quarter + 1))
    assert not small_messages([Message(role="assistant", tool_calls=(call,))])
    assert not small_messages([Message(role="assistant", reasoning="x" * (quarter + 1))])


def _reply(request: httpx.Request) -> httpx.Response:
    messages = json.loads(request.content)["messages"]
    count = len(messages)
    # asked to, the reply is larger than what is recorded in place
    padding = "!" * (INLINE_BYTES // 4) if messages[-1]["content"] == "say a lot" else ""
    message = {"role": "assistant", "content": f"seen {count}{padding}"}
    body = {"choices": [{"message": message, "finish_reason": "stop"}]}
    return httpx.Response(200, json={**body, "usage": {"prompt_tokens": 5, "completion_tokens": 1}})


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_reply)) as client:
        yield client


ENV = {"CAPSTAN_MODEL": "openai:m", "OPENAI_BASE_URL": "http://m/v1", "CAPSTAN_STREAM": "0"}


async def _steps(models: ModelActivities, news: list[Message]) -> list[str]:
    """One call per message in `news`, each naming the head the last one wrote."""
    tools = models.content.store_bytes(b"[]")
    head: BlobRef | None = None
    seen = []
    for step, new in enumerate(news, start=1):
        request = CallModelInput(
            run_id="r", step=step, profile="default", conversation=head, new_messages=(new,),
            tools=tools,
        )  # fmt: skip
        reply = await models.call_model(request)
        seen.append(models.content.resolve(reply.message.content)[:20])
        head = reply.conversation
    return seen


async def test_a_warm_small_step_is_prepared_and_recorded_in_place(
    tmp_path: Path, http: httpx.AsyncClient, hops: Hops
) -> None:
    models = ModelActivities(ContentStore(LocalBlobStore(tmp_path)), ENV, http)
    seen = await _steps(models, [Message(role="user", content=f"m{i}") for i in range(4)])
    assert seen == ["seen 1", "seen 3", "seen 5", "seen 7"]
    # the first call prepares in a thread (nothing cached yet: the tools are read), then
    # records in place; every later call does both in place
    assert hops.of("ModelActivities") == ["_prepare"]


async def test_a_large_step_or_a_remote_store_takes_the_thread(
    tmp_path: Path, http: httpx.AsyncClient, hops: Hops
) -> None:
    local = ModelActivities(ContentStore(LocalBlobStore(tmp_path / "a")), ENV, http)
    large = Message(role="user", content="x" * (INLINE_BYTES // 4 + 1))
    await _steps(local, [Message(role="user", content="m"), large])
    # the first call's preparation; both halves of the large one
    assert hops.of("ModelActivities") == ["_prepare", "_prepare", "_record"]
    hops.calls.clear()
    remote = CachedBlobStore(LocalBlobStore(tmp_path / "remote"), tmp_path / "cache", 1 << 20)
    assert not remote.on_local_disk
    models = ModelActivities(ContentStore(remote), ENV, http)
    seen = await _steps(models, [Message(role="user", content=f"m{i}") for i in range(3)])
    assert seen == ["seen 1", "seen 3", "seen 5"]
    assert hops.of("ModelActivities") == ["_prepare", "_record"] * 3


async def test_a_released_conversation_or_a_large_reply_takes_the_thread(
    tmp_path: Path, http: httpx.AsyncClient, hops: Hops
) -> None:
    models = ModelActivities(ContentStore(LocalBlobStore(tmp_path)), ENV, http)
    first = Message(role="user", content="m")
    tools = models.content.store_bytes(b"[]")
    one = await models.call_model(
        CallModelInput(run_id="r", step=1, profile="default", conversation=None,
                       new_messages=(first,), tools=tools)
    )  # fmt: skip
    # the worker gave its caches back while the run waited: the next call reads its
    # conversation again, in a thread
    assert models.release_idle(0)
    hops.calls.clear()
    more = CallModelInput(
        run_id="r", step=2, profile="default", conversation=one.conversation,
        new_messages=(Message(role="user", content="say a lot"),), tools=tools,
    )  # fmt: skip
    reply = await models.call_model(more)
    assert isinstance(reply.message.content, BlobRef)  # the large reply, stored as a ref
    assert hops.of("ModelActivities") == ["_prepare", "_record"]


def test_a_configured_blob_directory_is_not_taken_for_local_disk(tmp_path: Path) -> None:
    """It may be a network filesystem shared by every machine (`CAPSTAN_BLOB_URL`)."""
    from capstan.runtime.blobs import blob_store_for
    from capstan.runtime.config import Settings

    default = blob_store_for(Settings(data_dir=tmp_path))
    named = blob_store_for(Settings(data_dir=tmp_path, blob_url=str(tmp_path / "shared")))
    as_url = blob_store_for(Settings(data_dir=tmp_path, blob_url=f"file://{tmp_path}/s"))
    assert default.on_local_disk and not named.on_local_disk and not as_url.on_local_disk
