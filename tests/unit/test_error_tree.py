"""One exception tree (`capstan.core.errors`): the leaves sit on the branches its docstring
draws, so `except CapstanError` (the CLI's and the worker's one catch) holds every error Capstan
raises on purpose, and a branch catches its own kind."""

from __future__ import annotations

import re

import pytest

from capstan.cli.support import CliError
from capstan.client.agents import AgentsError
from capstan.client.runs import RejectedError, RunNotFoundError, UpdateTimeoutError
from capstan.client.schedules import ScheduleError
from capstan.client.threads import ThreadError
from capstan.core import errors
from capstan.core.errors import CapstanError, ConfigError, ConnectError, SteeringError, StoreError
from capstan.runtime import environment
from capstan.runtime.blobstore import BlobError, BlobUnavailableError
from capstan.runtime.codec import CodecError
from capstan.runtime.embedded import EmbeddedServerError
from capstan.runtime.local_model import LocalModelError
from capstan.runtime.temporal_connection import TemporalConnectError

BRANCHES: dict[type[Exception], type[Exception]] = {
    CodecError: ConfigError,
    TemporalConnectError: ConnectError,
    EmbeddedServerError: ConnectError,
    LocalModelError: ConnectError,
    RejectedError: SteeringError,
    UpdateTimeoutError: SteeringError,
    BlobError: StoreError,
    BlobUnavailableError: StoreError,
    RunNotFoundError: CapstanError,
    ThreadError: CapstanError,
    ScheduleError: CapstanError,
    AgentsError: CapstanError,
    CliError: CapstanError,
}


@pytest.mark.parametrize("leaf", list(BRANCHES), ids=lambda c: c.__name__)
def test_each_leaf_is_on_its_branch(leaf: type[Exception]) -> None:
    assert issubclass(leaf, BRANCHES[leaf]) and issubclass(leaf, CapstanError)


def test_the_drawn_tree_names_every_leaf_and_branch() -> None:
    drawn = set(re.findall(r"\b([A-Z][A-Za-z]*Error)\b", errors.__doc__ or ""))
    builtins = {"ValueError", "ConnectionError"}  # the branches' second bases
    leaves = {c.__name__ for c in BRANCHES} - {"BlobUnavailableError"}  # in the blob tree
    assert drawn - builtins == leaves | set(errors.__all__)


def test_one_config_error_everywhere() -> None:
    """The settings layer raises the tree's own class (not a look-alike a catch would miss)."""
    assert environment.ConfigError is ConfigError
    assert issubclass(ConfigError, ValueError) and issubclass(ConnectError, ConnectionError)


def test_the_root_is_public() -> None:
    import capstan

    assert capstan.CapstanError is CapstanError
