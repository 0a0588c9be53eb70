"""The worker's performance knobs: the workflow cache size from `CAPSTAN_MAX_CACHED_RUNS`, the
tools' first retry from the run's `ActivityTuning`, and a worker start that does not import the
MCP SDK when no MCP server is configured; a decision that goes out with no extra round trip;
Temporal's tracing interceptor only where spans can go."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from capstan.client.runs import CapstanClient
from capstan.core.activity_names import ActivityName
from capstan.core.activity_table import ACTIVITIES
from capstan.core.children import ChildRun
from capstan.core.spec import ActivityTuning
from capstan.runtime.config import ConfigError, Settings


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "temporal.toml"
    config.write_text("")
    return {"TEMPORAL_CONFIG_FILE": str(config)}


def test_the_workflow_cache_size_is_a_setting(env: dict[str, str]) -> None:
    assert Settings.from_env(env).max_cached_runs == 128
    assert Settings.from_env({**env, "CAPSTAN_MAX_CACHED_RUNS": "0"}).max_cached_runs == 0
    with pytest.raises(ConfigError, match="CAPSTAN_MAX_CACHED_RUNS"):
        Settings.from_env({**env, "CAPSTAN_MAX_CACHED_RUNS": "-1"})


def test_the_sticky_timeout_is_a_setting(env: dict[str, str]) -> None:
    assert Settings.from_env(env).sticky_timeout == 1.0
    assert Settings.from_env({**env, "CAPSTAN_STICKY_TIMEOUT": "5"}).sticky_timeout == 5.0
    with pytest.raises(ConfigError, match="CAPSTAN_STICKY_TIMEOUT"):
        Settings.from_env({**env, "CAPSTAN_STICKY_TIMEOUT": "0.5"})


def test_idle_memory_release_is_a_setting(env: dict[str, str]) -> None:
    assert Settings.from_env(env).idle_release == 60.0
    assert Settings.from_env({**env, "CAPSTAN_IDLE_RELEASE": "0"}).idle_release == 0.0
    with pytest.raises(ConfigError, match="CAPSTAN_IDLE_RELEASE"):
        Settings.from_env({**env, "CAPSTAN_IDLE_RELEASE": "soon"})


async def test_a_polling_worker_releases_the_idle_encoder() -> None:
    from capstan.activities import tokens
    from capstan.host.run_cache import RunCache
    from capstan.worker import _release_idle_memory

    assert _release_idle_memory(0, RunCache()) is None  # 0: kept for the worker's life
    tokens.count_tokens("a text the encoder counts now")
    task = _release_idle_memory(0.5, RunCache())
    assert task is not None
    try:
        for _ in range(100):  # checked every second: gone within a few
            if not tokens.loaded():
                break
            await asyncio.sleep(0.05)
        assert not tokens.loaded()
    finally:
        task.cancel()


def test_tool_first_retry_comes_from_the_tuning() -> None:
    options = ACTIVITIES[ActivityName.RUN_TOOL].options
    assert options(ActivityTuning(), None).initial_retry == 1.0  # what runs had before
    assert options(ActivityTuning(tool_initial_retry=0.25), 5.0).initial_retry == 0.25
    old_spec = ActivityTuning.model_validate({"tool_max_attempts": 3})  # recorded before it
    assert old_spec.tool_initial_retry == 1.0


def test_the_worker_imports_no_mcp_sdk_without_servers() -> None:
    probe = (
        "import sys, capstan.worker\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_the_worker_imports_no_httpx_command_line_tool() -> None:
    """httpx loads its CLI (rich, click, pygments) when they are installed: `capstan` marks it
    absent, an eighth of a bare Temporal import saved at every start."""
    probe = (
        "import sys, capstan.worker\n"
        "cli = ('httpx._main', 'rich', 'click', 'pygments')\n"
        "print(sorted(m for m in cli if sys.modules.get(m)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


async def test_a_decision_for_the_run_itself_needs_no_describe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`<run>/<step>/<call>` is the run's own request: no round trip to find its owner; a
    child's request (`<run>/<agent>-<step>.<i>/...`) still looks the child up."""
    described: list[str] = []

    async def children(run_id: str) -> list[ChildRun]:
        described.append(run_id)
        if run_id != "r1":
            return []
        return [ChildRun(workflow_id="r1/helper-2.0", agent="helper", step=2, call_id="c")]

    client = CapstanClient(None, Settings())  # type: ignore[arg-type]
    monkeypatch.setattr(client, "children", children)
    assert await client.owner("r1", "r1/12/call_7") == "r1"
    assert described == []
    assert await client.owner("r1", "r1/helper-2.0/3/call_1") == "r1/helper-2.0"
    assert described == ["r1"]  # the child owns `<child>/3/call_1` itself: no second look


def test_the_tracing_interceptor_only_where_spans_can_go() -> None:
    """Without a tracer provider every span is dropped, and the interceptor would still cost
    every activity a context header and every activation a wrapper: not installed."""
    from opentelemetry.sdk.trace import TracerProvider
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from capstan.host.runner import tracing_interceptors
    from capstan.runtime.telemetry import Instruments

    assert tracing_interceptors(Instruments(), None) == []  # the global default: a proxy
    provider = TracerProvider()
    (installed,) = tracing_interceptors(Instruments(provider), provider)
    assert isinstance(installed, TracingInterceptor)


def test_a_globally_installed_tracer_provider_turns_the_interceptor_on() -> None:
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from capstan.runtime.telemetry import Instruments\n"
        "from capstan.host.runner import tracing_interceptors\n"
        "assert tracing_interceptors(Instruments(), None) == []\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "assert len(tracing_interceptors(Instruments(), None)) == 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
