"""`CapstanTestEnv`: an agent tested in a few lines, on a real Temporal server.

    from capstan.testing import CapstanTestEnv, call, finish, say

    async def test_my_agent() -> None:
        async with CapstanTestEnv(tools=[lookup]) as env:
            env.model.script(say("Looking it up."), call("lookup", order=42), finish("shipped"))
            result = await env.run("Where is order 42?", allowed_tools=["lookup"])
            assert result.output == "shipped"
            env.model.assert_complete()

The environment starts the embedded Temporal dev server (or uses the one at `temporal=`), a
scripted fake model on a loopback socket and an in-process production worker with the given
tools, each on its own task queue and data directory. The run is a real durable run: policy,
approvals, the jail, history and replay are the ones production uses; only the model is
scripted. Tools that change state ask a person by default: `env.approve(run_id)` decides, or
start the run with `auto_approve=True`.

For many tests, share one server (`async with temporal_server() as server`, in a session fixture)
and pass `temporal=server.address`. Never used by production code.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from capstan.client.runs import CapstanClient, connect_temporal
from capstan.core.spec import RunResult, RunSpec
from capstan.core.steering import ApprovalRequest, PendingView
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.testing.fake_provider import Call, FakeProvider, Reply, say
from capstan.testing.ports import free_port
from capstan.testing.worker import FAST, running_worker

__all__ = ["CapstanTestEnv", "ScriptedModel", "temporal_server"]

T = TypeVar("T")

#: a step of a script: a reply, a bare tool call (one call, no text), or a bare text
Step = Reply | Call | str


@dataclass
class ScriptedModel:
    """The model of a `CapstanTestEnv`: a fake provider answering step N with the Nth reply.

    A retried or replayed model call gets the same reply (the step is read from the request),
    so a script holds for a durable run. `requests` are what the model was sent."""

    fake: FakeProvider = field(default_factory=lambda: FakeProvider([]))

    def script(self, *steps: Step) -> ScriptedModel:
        """The replies, one per step, replacing any earlier script."""
        self.fake.script = [s if isinstance(s, Reply) else say(s) for s in steps]
        return self

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every model request received (compaction summaries excluded), in arrival order."""
        return self.fake.requests

    def unused(self) -> list[int]:
        """The scripted steps no request reached."""
        script = self.fake.script
        seen = set(self.fake.steps_seen())
        return [i for i in range(len(script) if isinstance(script, list) else 0) if i not in seen]

    def assert_complete(self) -> None:
        """Fail unless every scripted reply was asked for."""
        unused = self.unused()
        assert not unused, f"the model was never asked for the scripted steps {unused}"


@contextlib.asynccontextmanager
async def temporal_server(data_dir: Path | None = None) -> AsyncIterator[EmbeddedServer]:
    """The embedded Temporal dev server on a free loopback port, for the block (its database
    in `data_dir`, default a temporary directory)."""
    with contextlib.ExitStack() as stack:
        where = data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = EmbeddedServer(where / "temporal", port=free_port())
        await server.start()
        try:
            yield server
        finally:
            server.stop()


class CapstanTestEnv:
    """A Temporal server, a scripted model and a worker with `tools`, for an `async with`.

    `tools`: tool functions (`@capstan.tool` or plain async functions), or the dotted name of
    a module with a `tools` list (what `CAPSTAN_TOOLS` names). `temporal`: the address of a
    running server (default: start one). `env`: more worker variables (`CAPSTAN_MCP`, ...).
    `settings`: `Settings` fields (`policy_file`, `finish_guard`, ...)."""

    __test__ = False  # pytest: not a test class

    def __init__(
        self,
        tools: Sequence[Callable[..., Any]] | str = (),
        *,
        temporal: str | None = None,
        data_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> None:
        self.model = ScriptedModel()
        self._tools = tools
        self._temporal = temporal
        self._data_dir = data_dir
        self._env = dict(env or {})
        self._settings = settings
        self._stack = contextlib.AsyncExitStack()
        self._client: CapstanClient | None = None

    @property
    def client(self) -> CapstanClient:
        """A client on the environment's server and task queue (start, steer, read runs)."""
        if self._client is None:
            raise RuntimeError("use CapstanTestEnv in `async with`")
        return self._client

    @property
    def settings(self) -> Settings:
        return self.client.settings

    @property
    def workspace(self) -> Path:
        """The directory the file and shell tools work in."""
        return self.settings.workspace_dir

    async def __aenter__(self) -> CapstanTestEnv:
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._stack.aclose()
        self._client = None

    async def _open(self) -> None:
        stack = self._stack
        root = self._data_dir
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            root.chmod(0o755)  # a root worker's jail runs as another uid: it must get in
        address = self._temporal
        if address is None:
            address = (await stack.enter_async_context(temporal_server(root))).address
        settings = Settings(
            data_dir=root / "data",
            temporal_address=address,
            task_queue=f"test-{uuid.uuid4().hex[:12]}",
            tools_module=stack.enter_context(_tools_module(self._tools)),
            **self._settings,
        )
        settings.workspace_dir.mkdir(parents=True, exist_ok=True)
        temporal = await connect_temporal(settings)
        stack.enter_context(self.model.fake)
        await stack.enter_async_context(
            running_worker(temporal, settings, self.model.fake, self._env)
        )
        self._client = CapstanClient(temporal, settings)
        # a run started before the worker polls would wait (and be warned about)
        await _poll(self._client.workers_polling, bool, timeout=30.0)

    def spec(self, task: str, **fields: Any) -> RunSpec:
        """A run spec with fast model retries unless `fields` says otherwise."""
        fields.setdefault("tuning", FAST)
        return RunSpec(task=task, **fields)

    async def start(self, task: str, **fields: Any) -> str:
        """Start a run of `task` (`fields`: any `RunSpec` field); its id."""
        return await self.client.start_run(self.spec(task, **fields))

    async def result(self, run_id: str, timeout: float = 60.0) -> RunResult:
        """How the run ended. A run still going after `timeout` seconds fails the test with
        what it waits for (an approval, an answer, a grant)."""
        try:
            return await asyncio.wait_for(self.client.result(run_id), timeout)
        except TimeoutError:
            view = await self.client.pending(run_id)
            message = f"run {run_id} did not end in {timeout} s: {_waits(view)}"
            raise AssertionError(message) from None

    async def run(self, task: str, *, timeout: float = 60.0, **fields: Any) -> RunResult:
        """Start a run of `task` and wait for its end (see `result`)."""
        return await self.result(await self.start(task, **fields), timeout)

    async def pending(
        self,
        run_id: str,
        ready: Callable[[PendingView], bool] = lambda view: bool(view.approvals),
        timeout: float = 30.0,
    ) -> PendingView:
        """What the run waits for, once `ready` says so (default: an approval is open)."""
        return await _poll(lambda: self.client.pending(run_id), ready, timeout)

    async def approve(self, run_id: str, tool: str | None = None) -> ApprovalRequest:
        """Wait for an approval request (of `tool`, if named), approve it; the request."""

        def wanted(view: PendingView) -> list[ApprovalRequest]:
            return [a for a in view.approvals if tool is None or a.tool == tool]

        view = await self.pending(run_id, lambda v: bool(wanted(v)))
        request = wanted(view)[0]
        await self.client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
        return request


async def _poll(get: Callable[[], Awaitable[T]], ready: Callable[[T], bool], timeout: float) -> T:
    """`await get()` until `ready` says yes (TimeoutError after `timeout` seconds)."""
    async with asyncio.timeout(timeout):
        while True:
            value = await get()
            if ready(value):
                return value
            await asyncio.sleep(0.05)


def _waits(view: PendingView) -> str:
    waits = [f"approval of {a.tool} ({a.request_id})" for a in view.approvals]
    waits += [f"an answer to {q.question!r} ({q.request_id})" for q in view.questions]
    waits += ["a step grant"] * view.awaiting_steps + ["a resume"] * view.paused
    if not waits:
        return "it waits for nothing a person gives (is the model's script long enough?)"
    return "it waits for " + ", ".join(waits) + " (env.approve(run_id), or auto_approve=True)"


@contextlib.contextmanager
def _tools_module(tools: Sequence[Callable[..., Any]] | str) -> Iterator[str | None]:
    """The dotted name the worker imports tools from: the given one, or a module made here
    holding the given functions (so they load the way `CAPSTAN_TOOLS` loads a user's)."""
    if isinstance(tools, str):
        yield tools
        return
    if not tools:
        yield None
        return
    name = f"_capstan_test_tools_{uuid.uuid4().hex[:12]}"
    module = ModuleType(name, "tools of a CapstanTestEnv")
    module.tools = list(tools)  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        yield name
    finally:
        del sys.modules[name]
