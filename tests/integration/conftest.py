"""The `agent` fixture: a scripted model, a worker and a client on the test's own task queue."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from capstan.runtime.config import Settings
from tests.integration.scripted_agent import Agent


@pytest.fixture
def agent(temporal: Client, settings: Settings) -> Agent:
    return Agent(temporal, settings)
