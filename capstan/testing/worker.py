"""An in-process worker whose model is a `FakeProvider`: what Capstan's own integration tests
and `CapstanTestEnv` run agents on.

The worker is the production one (`capstan.worker.build_worker` on the configuration
`capstan.host.config.load_worker_config` reads: every activity, the tool registry, policy, the
jail); only its environment differs, so the model profile resolves to the
fake. Its environment is the mapping given here, never the process's: a test sees no key of the
developer's shell. Never used by production code.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from temporalio.client import Client

from capstan.core.spec import ActivityTuning
from capstan.host.config import load_worker_config
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider
from capstan.worker import build_worker

__all__ = ["FAST", "SECRET_KEY", "model_env", "running_worker"]

#: the fake's API key: a test can check it never reaches history, logs or errors
SECRET_KEY = "sk-test-secret-key-123456"

#: retries fast enough for a test; two attempts per model call
FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=2)


def model_env(fake: FakeProvider) -> dict[str, str]:
    """The variables that make the default model profile the fake."""
    return {
        "CAPSTAN_MODEL": "openai:fake",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": SECRET_KEY,
    }


@contextlib.asynccontextmanager
async def running_worker(
    temporal: Client,
    settings: Settings,
    fake: FakeProvider,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> AsyncIterator[None]:
    """An in-process worker on `settings.task_queue` whose model is the fake (plus `env`
    overrides), for the block. `options` go to `build_worker`."""
    worker_env = {**model_env(fake), **(env or {})}
    async with (
        httpx.AsyncClient() as http,
        build_worker(temporal, load_worker_config(settings, worker_env), http, **options),
    ):
        yield
