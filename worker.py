"""The composition root: configuration -> Temporal client -> worker. No logic lives here.

`python worker.py` is the same as `capstan worker`. With no Temporal address configured
(`TEMPORAL_ADDRESS` or a `temporal.toml` profile), the embedded dev server is started (or
reused) first and stopped on exit. A setting that cannot be used stops the worker at start with
one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.metadata
import logging
import os
import signal
import sys
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
from opentelemetry.trace import TracerProvider
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.worker import Interceptor, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from capstan.activities.compaction import CompactionActivities
from capstan.activities.model import ModelActivities
from capstan.activities.notify import NotifyActivities
from capstan.activities.tokens import count_tokens, release_if_idle
from capstan.activities.tool_runner import FinishGuard, ToolActivities
from capstan.activities.tools.builtins import LOOP_TOOL_SPECS, builtin_tools
from capstan.activities.tools.jail import Jail, JailUnavailable, SandboxSettings, probe_jail
from capstan.activities.tools.jail_reach import workspace_block
from capstan.activities.tools.mcp import McpTools, load_mcp
from capstan.activities.tools.registry import ToolRegistry
from capstan.activities.tools.workspaces import tenants_root
from capstan.client.runs import connect_temporal
from capstan.core.errors import CapstanError
from capstan.core.spec import ToolRule
from capstan.runtime.blobs import blob_store_for, check_blob_store, content_store_for
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.config import ConfigError, ModelSettings, Settings
from capstan.runtime.embedded import EmbeddedServer
from capstan.runtime.environment import validation_summary
from capstan.runtime.health import Health, blob_check, serve_health, temporal_check
from capstan.runtime.local_model import local_model_env
from capstan.runtime.memory import release_when_idle, tune_malloc
from capstan.runtime.run_cache import RunCache
from capstan.runtime.sdk_shortcuts import install as install_sdk_shortcuts
from capstan.runtime.telemetry import Instruments, configure_from_env, tracing_configured
from capstan.runtime.webhooks import load_webhooks
from capstan.startup import check_models, check_variables, log_offer
from capstan.workflows.agent import AgentWorkflow

__all__ = [
    "build_mcp",
    "build_registry",
    "build_worker",
    "load_finish_guard",
    "load_policy",
    "main",
    "run_worker",
    "sandbox_jail",
    "temporal_for",
    "workflow_runner",
]

log = logging.getLogger("capstan.worker")


def build_registry(tools_module: str | None, jail: Jail | None = None) -> ToolRegistry:
    """Builtins (with the sandbox tools when there is a `jail`) plus the user's tools from
    `CAPSTAN_TOOLS=pkg.module` (its `tools` list)."""
    registry = ToolRegistry(builtin_tools(jail))
    for spec in LOOP_TOOL_SPECS:
        registry.add_spec(spec)
    if tools_module:
        registry.add_module(_import(tools_module, "CAPSTAN_TOOLS"), tools_module)
    return registry


def sandbox_jail(settings: Settings, env: Mapping[str, str]) -> Jail | None:
    """The jail for `run_shell` / `run_python`, or None, said once at start with the reason:
    code never runs unjailed."""
    sandbox = SandboxSettings.from_env(env)
    blocked = workspace_block(settings.workspace_dir, sandbox)  # bwrap: only "Permission denied"
    if blocked is not None:
        log.warning("run_shell and run_python are not offered: %s", blocked)
        return None
    jail = probe_jail(
        sandbox,
        settings.workspace_dir,
        hidden=[
            *(p for p in (settings.data_dir, settings.codec_key_file) if p is not None),
            tenants_root(settings.workspace_dir),  # the other tenants' workspaces
        ],
    )
    if isinstance(jail, JailUnavailable):
        log.warning("run_shell and run_python are not offered: %s", jail.reason)
        return None
    if jail.network_unavailable is not None:  # such calls run without network, never the host's
        log.log(
            logging.ERROR if settings.sandbox_network else logging.INFO,
            "sandbox.network: jails get no network on this worker: %s",
            jail.network_unavailable,
        )
    if jail.python is None:
        log.warning("run_python is not offered: the jail has no python3")
    if not jail.writable:
        log.warning(
            "run_shell and run_python can only read the workspace: uid %s may not write it",
            jail.user[0] if jail.user else os.geteuid(),
        )
    return jail


def build_worker(
    client: Client,
    settings: Settings,
    http: httpx.AsyncClient,
    env: Mapping[str, str] | None = None,
    *,
    extra_workflows: Sequence[type] = (),
    tracer_provider: TracerProvider | None = None,
    run_cache: RunCache | None = None,
    registry: ToolRegistry | None = None,
    **worker_options: object,
) -> Worker:
    """A worker with the agent workflow and every activity, dependencies injected.

    Tracing: Temporal's replay-safe interceptor plus model and tool spans, on `tracer_provider`
    (default: the global one, which `configure_from_env` sets from `OTEL_*`). With a
    `run_cache`, every run the worker creates reports to it, and it can evict the worker's idle
    runs (`capstan.runtime.run_cache`); call from the event loop that will run the worker.
    The tools are `registry` when given (`run_worker` builds it before it connects), else the
    builtins, the sandbox tools if the jail works, and `CAPSTAN_TOOLS`.
    """
    telemetry = Instruments(tracer_provider)
    install_sdk_shortcuts()  # no payload walks for keyless runs: see capstan.runtime.sdk_shortcuts
    content = content_store_for(settings, count_tokens)
    models = ModelActivities(
        content,
        env if env is not None else os.environ,
        http,
        count_tokens=count_tokens,
        telemetry=telemetry,
        workspace=settings.workspace_dir,
        local_choices=settings.local_choices,
    )
    compaction = CompactionActivities(content, models, http, count_tokens)
    worker_env = env if env is not None else os.environ
    hooks = load_webhooks(settings.webhooks_file)  # secrets are read per post, not here
    notify = NotifyActivities(hooks, worker_env, content, settings.inbox_url)
    if registry is None:
        registry = build_registry(settings.tools_module, sandbox_jail(settings, worker_env))
    mcp = build_mcp(settings, env if env is not None else os.environ, content, registry)
    tools = ToolActivities(
        registry,
        content,
        settings.workspace_dir,
        load_policy(settings.policy_file),
        telemetry=telemetry,
        finish_guard=load_finish_guard(settings.finish_guard),
        mcp=mcp,
        notify=hooks.kinds(),
        sandbox_ceiling=settings.sandbox_ceiling,
    )
    options: dict[str, object] = {
        # a run whose worker died moves to another worker's queue after this long (recovery)
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=1),
        # given, not computed: the SDK's default hashes every loaded module (~0.6 s at start)
        "build_id": _build_id(),
        # a cached run costs ~150 KB; an evicted one is replayed from history when it next
        # moves (~10 ms for a short history), so a run parked for a person costs ~6 KB here
        "max_cached_workflows": settings.max_cached_runs,  # CAPSTAN_MAX_CACHED_RUNS
        "workflow_runner": (
            run_cache.runner(workflow_runner(settings)) if run_cache else workflow_runner(settings)
        ),
        # streamed text rides on heartbeats: let them reach watchers within a second
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
        "interceptors": tracing_interceptors(telemetry, tracer_provider),
        "activity_executor": ThreadPoolExecutor(4),
        # MCP sessions (stdio server processes) live as long as the worker; webhook deliveries
        # run beside it on their own task queue and slots (capstan.activities.deliveries)
        "plugins": [notify.plugin(), *([mcp.plugin()] if mcp is not None else [])],
    }
    options.update(worker_options)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[AgentWorkflow, *extra_workflows],
        activities=[
            models.describe_model,
            models.call_model,
            compaction.compact_context,
            tools.list_tools,
            tools.run_tool,
            tools.check_finish,
        ],
        **options,  # type: ignore[arg-type]
    )
    if run_cache is not None:
        run_cache.attach(worker, client)
    return worker


def tracing_interceptors(
    telemetry: Instruments, tracer_provider: TracerProvider | None
) -> list[Interceptor]:
    """Temporal's replay-safe tracing interceptor, when spans can go anywhere.

    With no tracer provider configured every span is dropped, yet the interceptor still
    propagates a context header through every activity and wraps every activation: measured
    at 10-18% of a worker's CPU per iteration of the overhead bench (20.3 -> 16.7-18.5 ms). So
    it is installed only with a provider (`OTEL_EXPORTER_OTLP_ENDPOINT`, or one given or set
    globally before the worker is built). Workflow spans are made even when the client that
    started the run does not trace.
    """
    if not tracing_configured(tracer_provider):
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(telemetry.tracer, always_create_workflow_spans=True)]


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """How the workflow code runs (`CAPSTAN_WORKFLOW_SANDBOX`).

    The only workflow code a Capstan worker runs is Capstan's own, and its determinism is
    checked where it is written: ruff bans clocks, sleeps, randomness, uuid, environment reads,
    threads, subprocesses, sockets and IO libraries in `capstan/core` and `workflows/`,
    import-linter keeps IO layers out of them, a test forbids mutable module state there, the
    stored histories replay under Temporal's strict sandbox, and the test suite runs every
    in-process run under it (`strict`: modules re-imported per run, restricted calls refused).
    A worker then runs it `off` the sandbox (the default): the sandbox's protection is the same
    as the suite's, its cost is per run and per activation (a module import per run, code
    strings `exec`ed for every payload; replaying a stored 81-event history took 56 ms strict
    and 25 ms off). Sharing the modules into the sandbox (`with_passthrough_modules`, 35 ms)
    turns the restrictions off for exactly this code, so it is not offered.
    """
    if settings.workflow_sandbox == "strict":
        return SandboxedWorkflowRunner()
    return UnsandboxedWorkflowRunner()


def _build_id() -> str:
    """Capstan's version and a hash of the code that decides what a run does (the pure core
    and the workflow): what Temporal's default build id stands for, at a fraction of its cost."""
    digest = hashlib.sha256()
    for package in (AgentWorkflow.__module__, ToolRule.__module__):
        folder = Path(sys.modules[package].__file__ or ".").parent
        for source in sorted(folder.glob("*.py")):
            digest.update(source.name.encode() + source.read_bytes())
    return f"capstan-{importlib.metadata.version('capstan')}-{digest.hexdigest()[:12]}"


def build_mcp(
    settings: Settings, env: Mapping[str, str], content: ContentStore, registry: ToolRegistry
) -> McpTools | None:
    """The worker's MCP servers (`CAPSTAN_MCP=mcp.toml`), or None when there are none."""
    config = load_mcp(settings.mcp_file, env, registry.names())
    return McpTools(config, env, content) if config.servers else None


def load_finish_guard(spec: str | None) -> FinishGuard | None:
    """`CAPSTAN_FINISH_GUARD=pkg.module:function`, an async function
    `(answer, run_id, step) -> reason | None` that may refuse a run's first finish."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    guard: FinishGuard | None = getattr(
        _import(module_name, "CAPSTAN_FINISH_GUARD"), attr or "finish_guard", None
    )
    if not callable(guard):
        raise ConfigError(f"CAPSTAN_FINISH_GUARD={spec}: {module_name} has no function {attr!r}")
    return guard


def _import(module_name: str, variable: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{variable}={module_name}: cannot import it: {exc}") from exc
    except Exception as exc:  # the module itself raised: it is the user's code, say what
        said = (str(exc).splitlines() or [""])[0]
        problem = f"{type(exc).__name__}: {said}"
        raise ConfigError(f"{variable}={module_name}: importing it raised {problem}") from exc


def load_policy(path: Path | None) -> dict[str, ToolRule]:
    """The worker's tool policy file (TOML): `[tools.NAME] decision = "ask"`, `deny_arguments`.

    Example::

        [tools.write_file]
        decision = "ask"
        deny_arguments = { path = "^secrets/" }
    """
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        tools = data.get("tools", {})
        return {name: ToolRule.model_validate(rule) for name, rule in tools.items()}
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"is not valid TOML: {exc}"
    except ValidationError as exc:
        problem = f"has an invalid rule: {validation_summary(exc)}"
    except (AttributeError, TypeError):
        problem = "is not a table of `[tools.NAME]` rules"
    raise ConfigError(f"CAPSTAN_POLICY={path}: the policy file {problem}")


@contextlib.asynccontextmanager
async def temporal_for(settings: Settings) -> AsyncIterator[Client]:
    """Connect as configured (`temporalio.envconfig`), or, with no address configured, start or
    reuse the embedded server for the duration."""
    if not settings.embedded:
        yield await connect_temporal(settings)
        return
    async with EmbeddedServer(settings.data_dir, settings.embedded_port) as server:
        if server.reused:
            log.info("reusing the Temporal server at %s", server.address)
        else:
            log.info("started the embedded Temporal server at %s", server.address)
        yield await connect_temporal(settings)


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run a worker until `stop` is set (or forever)."""
    stop = stop or asyncio.Event()
    tune_malloc(os.environ)  # before the Temporal runtime starts its threads
    # every setting that can be wrong is checked before a server is started or dialled
    ModelSettings.from_env()
    doubts = check_models(os.environ)  # every profile a run may name resolves
    policy = load_policy(settings.policy_file)
    load_finish_guard(settings.finish_guard)
    mcp = load_mcp(settings.mcp_file, os.environ, build_registry(settings.tools_module).names())
    load_webhooks(settings.webhooks_file, os.environ)  # every URL and secret resolves
    check_blob_store(blob_store_for(settings), settings)  # reachable, bucket there, keys valid
    for line in [*check_variables(os.environ), *doubts]:
        log.warning("%s", line)
    registry = build_registry(settings.tools_module, sandbox_jail(settings, os.environ))
    log_offer(registry, policy, mcp)
    configure_from_env()
    health = Health()  # alive from here on (the embedded server may take a while), not ready
    with local_model_env(dict(os.environ), settings.data_dir) as env:
        async with (
            serve_health(health, settings.health_host, settings.health_port),
            temporal_for(settings) as client,
            httpx.AsyncClient() as http,
        ):
            grace = timedelta(seconds=settings.shutdown_grace)
            runs = RunCache()
            worker = build_worker(
                client,
                settings,
                http,
                env,
                run_cache=runs,
                registry=registry,
                graceful_shutdown_timeout=grace,
            )
            await _poll_until(stop, worker, client, settings, health, runs=runs)


async def _poll_until(
    stop: asyncio.Event,
    worker: Worker,
    client: Client,
    settings: Settings,
    health: Health,
    *,
    runs: RunCache,
) -> None:
    """Poll until `stop`; then drain: not ready at once, no new tasks, and the activities
    already running get `CAPSTAN_SHUTDOWN_GRACE` seconds to finish and report before the
    worker cancels them (so a SIGTERM mid-tool is not a retry)."""
    async with worker:
        health.watch(
            {
                "worker": _polling(worker),
                "temporal": temporal_check(client),
                "blobs": blob_check(blob_store_for(settings)),
            }
        )
        log.info("worker polling task queue %r", settings.task_queue)
        releasing = _release_idle_memory(settings.idle_release, runs)
        try:
            await stop.wait()
        finally:
            if releasing is not None:
                releasing.cancel()
        health.draining = True
        log.info("draining: no new tasks; running activities get %gs", settings.shutdown_grace)
    log.info("worker stopped")


def _release_idle_memory(idle: float, runs: RunCache) -> asyncio.Task[None] | None:
    """Give back what the worker has not used for `idle` seconds (`CAPSTAN_IDLE_RELEASE`; 0:
    never): the token encoder, loaded again by the next count that needs it, and the cached
    state of runs that have not moved, replayed from history when they next do."""
    if idle <= 0:
        return None
    return asyncio.create_task(release_when_idle([release_if_idle, runs.release], idle))


def _polling(worker: Worker) -> Callable[[], Awaitable[None]]:
    async def check() -> None:
        if not worker.is_running:
            raise RuntimeError("the worker is not polling (it stopped on an error; see its log)")

    return check


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(Settings.from_env(), stop)

    try:
        asyncio.run(serve())
    except CapstanError as exc:  # configuration, connection, store: capstan.core.errors
        log.error("%s", exc)  # one line, no traceback: it names what to change
        sys.exit(2)


if __name__ == "__main__":
    main()
