"""The composition root: configuration -> Temporal client -> worker. No logic lives here.

`python worker.py` is the same as `capstan worker`. With no Temporal address configured
(`TEMPORAL_ADDRESS` or a `temporal.toml` profile), the embedded dev server is started (or
reused) first and stopped on exit. A setting that cannot be used stops the worker at start with
one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
import tomllib
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
from opentelemetry.trace import TracerProvider
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Worker

from capstan.activities.compaction import CompactionActivities
from capstan.activities.model import ModelActivities
from capstan.activities.tokens import count_tokens
from capstan.activities.tool_runner import FinishGuard, ToolActivities
from capstan.activities.tools.builtins import BUILTIN_TOOLS, LOOP_TOOL_SPECS
from capstan.activities.tools.registry import ToolRegistry
from capstan.client.runs import connect_temporal
from capstan.core.spec import ToolRule
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.config import ConfigError, ModelSettings, Settings
from capstan.runtime.embedded import EmbeddedServer, EmbeddedServerError
from capstan.runtime.environment import validation_summary
from capstan.runtime.local_model import local_model_env
from capstan.runtime.telemetry import Instruments, configure_from_env
from capstan.runtime.temporal_connection import TemporalConnectError
from capstan.workflows.agent import AgentWorkflow

__all__ = [
    "build_registry",
    "build_worker",
    "load_finish_guard",
    "load_policy",
    "main",
    "run_worker",
    "temporal_for",
]

log = logging.getLogger("capstan.worker")


def build_registry(tools_module: str | None) -> ToolRegistry:
    """Builtins plus the user's tools from `CAPSTAN_TOOLS=pkg.module` (its `tools` list)."""
    registry = ToolRegistry(BUILTIN_TOOLS)
    for spec in LOOP_TOOL_SPECS:
        registry.add_spec(spec)
    if tools_module:
        module = _import(tools_module, "CAPSTAN_TOOLS")
        for fn in getattr(module, "tools", []):
            registry.add(fn)
    return registry


def build_worker(
    client: Client,
    settings: Settings,
    http: httpx.AsyncClient,
    env: Mapping[str, str] | None = None,
    *,
    extra_workflows: Sequence[type] = (),
    tracer_provider: TracerProvider | None = None,
    **worker_options: object,
) -> Worker:
    """A worker with the agent workflow and every activity, dependencies injected.

    Tracing: Temporal's replay-safe interceptor plus model and tool spans, on `tracer_provider`
    (default: the global one, which `configure_from_env` sets from `OTEL_*`).
    """
    telemetry = Instruments(tracer_provider)
    content = ContentStore(LocalBlobStore(settings.blob_dir), count_tokens=count_tokens)
    models = ModelActivities(
        content,
        env if env is not None else os.environ,
        http,
        count_tokens=count_tokens,
        telemetry=telemetry,
    )
    compaction = CompactionActivities(content, models, http, count_tokens)
    tools = ToolActivities(
        build_registry(settings.tools_module),
        content,
        settings.workspace_dir,
        load_policy(settings.policy_file),
        telemetry=telemetry,
        finish_guard=load_finish_guard(settings.finish_guard),
    )
    options: dict[str, object] = {
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=2),
        # streamed text rides on heartbeats: let them reach watchers within a second
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
        # workflow spans even when the client that started the run does not trace
        "interceptors": [TracingInterceptor(telemetry.tracer, always_create_workflow_spans=True)],
        "activity_executor": ThreadPoolExecutor(4),
    }
    options.update(worker_options)
    return Worker(
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
    # every setting that can be wrong is checked before a server is started or dialled
    ModelSettings.from_env()
    load_policy(settings.policy_file)
    load_finish_guard(settings.finish_guard)
    build_registry(settings.tools_module)
    configure_from_env()
    with local_model_env(dict(os.environ), settings.data_dir) as env:
        async with temporal_for(settings) as client, httpx.AsyncClient() as http:
            async with build_worker(client, settings, http, env):
                log.info("worker polling task queue %r", settings.task_queue)
                await stop.wait()


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
    except (ConfigError, TemporalConnectError, EmbeddedServerError) as exc:
        log.error("%s", exc)  # one line, no traceback: it names what to change
        sys.exit(2)


if __name__ == "__main__":
    main()
