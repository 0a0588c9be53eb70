"""The composition root: configuration -> Temporal client -> worker. No logic lives here.

`python worker.py` is the same as `capstan worker`. The worker's whole configuration is loaded
and checked once (`capstan.host.config`); with no Temporal address configured
(`TEMPORAL_ADDRESS` or a `temporal.toml` profile), the embedded dev server is started (or
reused) first and stopped on exit. A setting that cannot be used stops the worker at start with
one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
from opentelemetry.trace import TracerProvider
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from capstan.activities.compaction import CompactionActivities
from capstan.activities.inbox_queue import InboxActivities
from capstan.activities.model import ModelActivities
from capstan.activities.model_queues import ModelQueues
from capstan.activities.notify_request import NotifyActivities
from capstan.activities.tokens import count_tokens, release_if_idle
from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.mcp import McpTools
from capstan.core.errors import CapstanError
from capstan.host.config import WorkerConfig, load_worker_config
from capstan.host.health import Health, blob_check, serve_health, temporal_check
from capstan.host.memory import Releaser, release_when_idle, tune_malloc
from capstan.host.run_cache import RunCache
from capstan.host.runner import tracing_interceptors, workflow_runner
from capstan.host.sdk_shortcuts import install as install_sdk_shortcuts
from capstan.runtime.blobs import blob_store_for, content_store_for
from capstan.runtime.config import Settings
from capstan.runtime.connect import connect_temporal
from capstan.runtime.deployments import (
    check_joins,
    deployment_options,
    make_current_if_first,
)
from capstan.runtime.embedded import EmbeddedServer
from capstan.runtime.local_model import local_model_env
from capstan.runtime.telemetry import Instruments, configure_from_env
from capstan.workflows.agent import AgentWorkflow

__all__ = ["build_worker", "main", "run_worker", "temporal_for"]

log = logging.getLogger("capstan.worker")


def build_worker(
    client: Client,
    config: WorkerConfig,
    http: httpx.AsyncClient,
    *,
    extra_workflows: Sequence[type] = (),
    tracer_provider: TracerProvider | None = None,
    run_cache: RunCache | None = None,
    releasers: list[Releaser] | None = None,
    **worker_options: object,
) -> Worker:
    """A worker with the agent workflow and every activity, dependencies injected from
    `config` (`capstan.host.config.load_worker_config`).

    Tracing: Temporal's replay-safe interceptor plus model and tool spans, on `tracer_provider`
    (default: the global one, which `configure_from_env` sets from `OTEL_*`). With a
    `run_cache`, every run the worker creates reports to it, and it can evict the worker's idle
    runs (`capstan.host.run_cache`); call from the event loop that will run the worker. With
    `releasers`, what gives back memory the worker's activities have not used (the model
    calls' caches) is appended to it, for `capstan.host.memory.release_when_idle`.
    """
    settings, env = config.settings, config.env
    telemetry = Instruments(tracer_provider)
    install_sdk_shortcuts()  # no payload walks for keyless runs: see capstan.host.sdk_shortcuts
    content = content_store_for(settings, count_tokens)
    models = ModelActivities(
        content,
        env,
        http,
        count_tokens=count_tokens,
        telemetry=telemetry,
        workspace=settings.workspace_dir,
        local_choices=settings.local_choices,
        limited=config.limits,
    )
    if releasers is not None:
        releasers.append(models.release_idle)
    compaction = CompactionActivities(content, models, http, count_tokens)
    inbox = InboxActivities(content)
    notify = NotifyActivities(config.hooks, env, content, settings.inbox_url)
    mcp = McpTools(config.mcp, env, content) if config.mcp.servers else None
    tools = ToolActivities(
        config.registry,
        content,
        settings.workspace_dir,
        config.policy,
        telemetry=telemetry,
        finish_guard=config.finish_guard,
        mcp=mcp,
        notify=config.hooks.kinds(),
        sandbox_ceiling=settings.sandbox_ceiling,
    )
    # the limited profiles' model calls, on queues the server paces for the fleet
    paced = (
        [ModelQueues(config.limits, [models.call_model, compaction.compact_context], models.paced)]
        if config.limits
        else []
    )
    runner = workflow_runner(settings)
    options: dict[str, object] = {
        # a run whose worker died moves to another worker's queue after this long (recovery)
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=settings.sticky_timeout),
        # given, not computed: the SDK's default hashes every loaded module (~0.6 s at start);
        # with CAPSTAN_DEPLOYMENT, a pinned version of that Worker Deployment
        **deployment_options(settings.deployment, config.build_id),
        # a cached run costs ~150 KB; an evicted one is replayed from history when it next
        # moves (~10 ms for a short history), so a run parked for a person costs ~6 KB here
        "max_cached_workflows": settings.max_cached_runs,  # CAPSTAN_MAX_CACHED_RUNS
        "workflow_runner": run_cache.runner(runner) if run_cache else runner,
        # streamed text rides on heartbeats: let them reach watchers within a second
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
        "interceptors": tracing_interceptors(telemetry, tracer_provider),
        "activity_executor": ThreadPoolExecutor(4),
        # MCP sessions (stdio server processes) live as long as the worker; webhook deliveries
        # run beside it on their own task queue and slots (capstan.activities.deliveries)
        "plugins": [notify.plugin(), *([mcp.plugin()] if mcp is not None else []), *paced],
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
            inbox.spill_messages,
            inbox.take_messages,
        ],
        **options,  # type: ignore[arg-type]
    )
    if run_cache is not None:
        run_cache.attach(worker, client)
    return worker


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
    # httpx logs every request at INFO: a line per model call, which the worker logs itself
    # ("model replied"), and a measurable share of the event loop at 100 active runs
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # every setting that can be wrong is checked before a server is started or dialled
    config = load_worker_config(settings, os.environ, at_start=True)
    configure_from_env()
    health = Health()  # alive from here on (the embedded server may take a while), not ready
    with local_model_env(dict(os.environ), settings.data_dir) as env:
        config = dataclasses.replace(config, env=env)
        async with (
            serve_health(health, settings.health_host, settings.health_port),
            temporal_for(settings) as client,
            httpx.AsyncClient() as http,
        ):
            await check_joins(client, settings.task_queue, settings.deployment)
            grace = timedelta(seconds=settings.shutdown_grace)
            runs = RunCache()
            releasers: list[Releaser] = []  # the activities' (the model calls' caches)
            worker = build_worker(
                client,
                config,
                http,
                run_cache=runs,
                releasers=releasers,
                graceful_shutdown_timeout=grace,
            )
            await _poll_until(
                stop, worker, client, settings, health, runs=runs, releasers=releasers
            )


async def _poll_until(
    stop: asyncio.Event,
    worker: Worker,
    client: Client,
    settings: Settings,
    health: Health,
    *,
    runs: RunCache,
    releasers: Sequence[Releaser] = (),
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
        joining = (
            asyncio.create_task(_join_deployment(client, settings, worker))
            if settings.deployment is not None
            else None
        )
        releasing = _release_idle_memory(settings.idle_release, runs, releasers)
        try:
            await stop.wait()
        finally:
            for task in (releasing, joining):
                if task is not None:
                    task.cancel()
        health.draining = True
        log.info("draining: no new tasks; running activities get %gs", settings.shutdown_grace)
    log.info("worker stopped")


async def _join_deployment(client: Client, settings: Settings, worker: Worker) -> None:
    """Say which version this worker is; make it current when its deployment has none yet."""
    deployment = settings.deployment
    assert deployment is not None
    build = worker.config().get("deployment_config")
    build_id = build.version.build_id if build is not None else ""
    try:
        first = await make_current_if_first(
            client, deployment, build_id, settings.identity, settings.task_queue
        )
    except (RPCError, CapstanError) as exc:  # the worker serves its runs all the same
        log.warning("deployment %r: could not check its current build: %s", deployment, exc)
        first = False
    if first:
        log.info("deployment %r: %s is its first build, now current", deployment, build_id)
    log.info("worker is build %r of deployment %r (runs pinned to it)", build_id, deployment)


def _release_idle_memory(
    idle: float, runs: RunCache, more: Sequence[Releaser] = ()
) -> asyncio.Task[None] | None:
    """Give back what the worker has not used for `idle` seconds (`CAPSTAN_IDLE_RELEASE`; 0:
    never): the token encoder, loaded again by the next count that needs it, the cached state
    of runs that have not moved, replayed from history when they next do, and what the model
    calls cached for them (`more`), rendered again when they next call."""
    if idle <= 0:
        return None
    releasers: list[Releaser] = [release_if_idle, runs.release, *more]
    return asyncio.create_task(release_when_idle(releasers, idle))


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
