"""Every setting Capstan reads from its environment, declared in one place.

Two groups, each a pydantic-settings class whose fields name their variables:

- `Settings`: what the CLI, the client and the worker share — the data directory, the task
  queue, the worker's tools, policy and finish guard, and the Temporal connection. The
  connection is not a `CAPSTAN_*` variable: `temporalio.envconfig` resolves it from the
  `TEMPORAL_*` variables and the `temporal.toml` profile file, exactly as the `temporal` CLI
  does (`capstan.runtime.temporal_connection`). With no address configured anywhere the
  embedded dev server on `127.0.0.1:CAPSTAN_TEMPORAL_PORT` is used.
  The blob store (`CAPSTAN_BLOB_URL`, its cache) and the codec keys are here too: a client on
  another machine must resolve and decrypt exactly what the workers wrote
  (`capstan.runtime.blobs`, `capstan.runtime.codec`). S3 endpoint and credentials are the
  standard `AWS_*` variables (`capstan.runtime.s3.S3Access`).
- `ModelSettings`: what the worker's model activities read — which model the `default` profile
  is, the profiles file, streaming, the request timeout, provider endpoints.

Only edge code (CLI, client, worker) calls `from_env()`; a bad value is a `ConfigError` of one
line naming the variable. Secrets are not settings: provider API keys are read inside
activities from the worker's environment, by the variable name a profile gives (defaults in
`API_KEY_VARIABLES`), so a key never reaches a workflow input, history, log or error.
OpenTelemetry keeps its standard `OTEL_*` variables, which its SDK reads itself.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from capstan.core.spec import SandboxLimits
from capstan.runtime.data_dir import resolve_data_dir
from capstan.runtime.environment import ConfigError, EnvSettings, variables_of
from capstan.runtime.s3 import S3Access
from capstan.runtime.temporal_connection import TemporalAccess, load_temporal_profile

__all__ = [
    "API_KEY_VARIABLES",
    "DEFAULT_LOCAL_MODEL_PORT",
    "DEFAULT_PORT",
    "ConfigError",
    "ModelSettings",
    "Settings",
    "known_variables",
    "unknown_variables",
]

DEFAULT_PORT = 7233
DEFAULT_LOCAL_MODEL_PORT = 8765
DEFAULT_BLOB_CACHE_BYTES = 1 << 30

#: The variable each provider's API key is read from when a profile names none (`api_key_env`).
API_KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "local": "CAPSTAN_LOCAL_MODEL_KEY",
}


class Settings(EnvSettings):
    """Where things are and how to reach Temporal. See the README's Configuration table."""

    data_dir: Path = Field(Path(".capstan"), validation_alias="CAPSTAN_DATA_DIR")
    task_queue: str = Field("capstan", validation_alias="CAPSTAN_TASK_QUEUE", min_length=1)
    #: the Worker Deployment the worker joins (None: versioning off): each run stays on the
    #: build that started it and moves to the current one when it continues as new
    deployment: str | None = Field(
        None, validation_alias="CAPSTAN_DEPLOYMENT", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"
    )
    #: the worker's build id (None: Capstan's version and a hash of the run-deciding code)
    build_id: str | None = Field(
        None, validation_alias="CAPSTAN_BUILD_ID", pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$"
    )
    workspace: Path | None = Field(None, validation_alias="CAPSTAN_WORKSPACE")
    tools_module: str | None = Field(None, validation_alias="CAPSTAN_TOOLS")
    embedded_port: int = Field(
        DEFAULT_PORT, validation_alias="CAPSTAN_TEMPORAL_PORT", ge=1, le=65535
    )
    policy_file: Path | None = Field(None, validation_alias="CAPSTAN_POLICY")
    identity: str = Field("", validation_alias="CAPSTAN_IDENTITY")
    finish_guard: str | None = Field(None, validation_alias="CAPSTAN_FINISH_GUARD")
    mcp_file: Path | None = Field(None, validation_alias="CAPSTAN_MCP")
    agents_file: Path | None = Field(None, validation_alias="CAPSTAN_AGENTS")
    blob_url: str | None = Field(None, validation_alias="CAPSTAN_BLOB_URL")
    blob_cache_bytes: int = Field(
        DEFAULT_BLOB_CACHE_BYTES, validation_alias="CAPSTAN_BLOB_CACHE_BYTES", ge=0
    )
    codec_keys: SecretStr | None = Field(None, validation_alias="CAPSTAN_CODEC_KEYS")
    codec_key_file: Path | None = Field(None, validation_alias="CAPSTAN_CODEC_KEY_FILE")
    codec_server_token: SecretStr | None = Field(
        None, validation_alias="CAPSTAN_CODEC_SERVER_TOKEN"
    )
    s3: S3Access = S3Access()
    # The worker's /healthz and /readyz (capstan.host.health); off unless a port is given.
    health_port: int | None = Field(None, validation_alias="CAPSTAN_HEALTH_PORT", ge=1, le=65535)
    health_host: str = Field("0.0.0.0", validation_alias="CAPSTAN_HEALTH_HOST", min_length=1)
    # SIGTERM: seconds running activities get to finish after polling stops.
    shutdown_grace: float = Field(30.0, validation_alias="CAPSTAN_SHUTDOWN_GRACE", ge=0)
    # The Temporal connection, from temporalio.envconfig (see the module docstring).
    temporal_address: str | None = None
    namespace: str = "default"
    temporal: TemporalAccess = TemporalAccess()
    # Runs a worker keeps in memory (Temporal's workflow cache). A cached run costs ~150 KB,
    # an evicted one ~6 KB and is replayed from its history when it next moves (~10 ms short).
    max_cached_runs: int = Field(128, validation_alias="CAPSTAN_MAX_CACHED_RUNS", ge=0)
    # Seconds a workflow task waits on this worker's sticky queue before Temporal hands it to
    # any worker of the task queue with the run's whole history: how soon a run whose worker
    # died moves on (crash recovery), and how often a busy worker's tasks are taken from it
    # (bench/README.md, issue 28 fifth pass: at 100 active runs on 2 cores, 1 s let ~1% of
    # workflow tasks time out, 5 s none).
    sticky_timeout: float = Field(1.0, validation_alias="CAPSTAN_STICKY_TIMEOUT", ge=1)
    # Seconds a worker keeps memory it is not using before giving it back (the token encoder's
    # ~20 MB, and runs that have not moved: capstan.host.memory.release_when_idle,
    # capstan.host.run_cache); 0 keeps it for the worker's life.
    idle_release: float = Field(60.0, validation_alias="CAPSTAN_IDLE_RELEASE", ge=0)
    # How the workflow code runs (worker.workflow_runner): `off` in the worker's own process,
    # checked by the linters and by the test suite, which runs it `strict`ly (Temporal's
    # sandbox: workflow modules re-imported per run, clocks, randomness and IO refused).
    workflow_sandbox: Literal["off", "strict"] = Field(
        "off", validation_alias="CAPSTAN_WORKFLOW_SANDBOX"
    )
    # The worker's webhooks for opened requests (capstan.runtime.webhooks), and the base URL of
    # `capstan serve` their messages link to (`<inbox_url>/runs/<run>#<request>`).
    webhooks_file: Path | None = Field(None, validation_alias="CAPSTAN_WEBHOOKS")
    inbox_url: str | None = Field(None, validation_alias="CAPSTAN_INBOX_URL")
    # How the bundled (`local`) model's tool arguments are narrowed to what exists
    # (capstan.activities.providers.local_choices): paths only, also lines read, or nothing.
    local_choices: Literal["paths", "lines", "off"] = Field(
        "paths", validation_alias="CAPSTAN_LOCAL_CHOICES"
    )
    # The worker's ceilings for every run_shell / run_python call (a JSON object of
    # `SandboxLimits` numbers): what a run asks above them is lowered to them
    # (capstan.core.privilege.clamp_sandbox). Default: `SandboxLimits`' own defaults.
    sandbox_limits: Annotated[SandboxLimits, NoDecode] = Field(
        SandboxLimits(), validation_alias="CAPSTAN_SANDBOX_LIMITS"
    )
    # Whether a run's `sandbox.network = true` gives its jail a network; off: never.
    sandbox_network: bool = Field(False, validation_alias="CAPSTAN_SANDBOX_NETWORK")

    @field_validator("sandbox_limits", mode="before")
    @classmethod
    def _limits_only(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError("expected a JSON object of SandboxLimits fields") from None
        if isinstance(value, Mapping) and {"network", "retryable"} & set(value):
            raise ValueError("limits only: the network is CAPSTAN_SANDBOX_NETWORK")
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read `env` (default: the process environment) and the Temporal profile file."""
        env = os.environ if env is None else env
        profile = load_temporal_profile(env)
        values = cls.environment_values(env)
        values.setdefault("CAPSTAN_IDENTITY", _default_identity())
        # explicit, else the project's, else the user's (capstan.runtime.data_dir)
        values["CAPSTAN_DATA_DIR"] = str(resolve_data_dir(env, Path.cwd()))
        return cls.validated(
            **values,
            temporal_address=profile.address,
            namespace=profile.namespace or "default",
            temporal=profile.access,
            s3=S3Access.from_env(env),
        )

    @property
    def address(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.embedded_port}"

    @property
    def embedded(self) -> bool:
        return self.temporal_address is None

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def workspace_dir(self) -> Path:
        return self.workspace or self.data_dir / "workspace"

    @property
    def sandbox_ceiling(self) -> SandboxLimits:
        """The most a sandbox call of this worker may have (network included)."""
        return self.sandbox_limits.model_copy(update={"network": self.sandbox_network})


class ModelSettings(EnvSettings):
    """The worker's model settings, read from the worker's environment (which the bundled local
    model server may have amended). Keys are deliberately absent: see the module docstring."""

    model: str = Field("", validation_alias="CAPSTAN_MODEL")
    profiles_file: Path | None = Field(None, validation_alias="CAPSTAN_PROFILES")
    request_timeout: float | None = Field(None, validation_alias="CAPSTAN_MODEL_TIMEOUT", gt=0)
    stream: bool = Field(True, validation_alias="CAPSTAN_STREAM")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")
    anthropic_base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL")
    local_model_url: str | None = Field(None, validation_alias="CAPSTAN_LOCAL_MODEL_URL")
    local_model_port: int = Field(
        DEFAULT_LOCAL_MODEL_PORT, validation_alias="CAPSTAN_LOCAL_MODEL_PORT", ge=1, le=65535
    )

    def base_url(self, provider: str) -> str | None:
        """The endpoint set in the environment for `provider`, if any."""
        return {
            "openai": self.openai_base_url,
            "anthropic": self.anthropic_base_url,
            "local": self.local_model_url,
        }.get(provider)


def known_variables(
    groups: Iterable[type[EnvSettings]] = (), extra: Iterable[str] = ()
) -> frozenset[str]:
    """Every `CAPSTAN_*` variable Capstan reads: the fields of `Settings`, `ModelSettings` and
    the other settings `groups` (the API's, the jail's), the default key variables, and `extra`
    (variables read outside a settings class)."""
    names = {*API_KEY_VARIABLES.values(), *extra}
    every: list[type[EnvSettings]] = [Settings, ModelSettings, *groups]
    for group in every:
        names.update(variables_of(group).values())
    return frozenset(name for name in names if name.startswith("CAPSTAN_"))


def unknown_variables(env: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One warning line for each `CAPSTAN_*` variable of `env` that nothing reads (a typo is
    otherwise a setting silently left at its default), with the nearest known name."""
    prefix = "CAPSTAN_"
    names = set(known)
    # compared without the prefix every name shares, which would make anything look close
    tails = sorted(name.removeprefix(prefix) for name in names)
    lines = []
    for name in sorted(n for n in env if n.startswith(prefix) and n not in names):
        close = difflib.get_close_matches(name.removeprefix(prefix), tails, n=1, cutoff=0.65)
        hint = (
            f"did you mean {prefix}{close[0]}?" if close else "see the README's Configuration table"
        )
        lines.append(f"{name} is not a Capstan setting and is ignored: {hint}")
    return lines


def _default_identity() -> str:
    """`user@host`: recorded with every decision a client sends."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
