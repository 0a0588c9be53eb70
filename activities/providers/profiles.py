"""Model profiles: a name in the run spec, everything else from the worker's environment.

A name resolves, in order: `default` -> whatever `CAPSTAN_MODEL` names; a `[profiles.NAME]`
table of the profiles file (`CAPSTAN_PROFILES`, TOML); or `provider:model` with the provider's
standard variables (`OPENAI_BASE_URL`/`OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`/`ANTHROPIC_API_KEY`).
Every non-secret variable is declared in `capstan.runtime.config.ModelSettings`; keys alone are
read here from the worker's environment, inside activities, so they never reach a workflow
input or history.

Example profiles file::

    [profiles.main]
    provider = "anthropic"
    model = "claude-sonnet-4-5"
    api_key_env = "ANTHROPIC_API_KEY"
    context_window = 200000
    max_output_tokens = 8192
    prices = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }
    fallback = ["backup"]

    [profiles.backup]
    provider = "openai"
    model = "gpt-4o-mini"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from capstan.core.models import ModelChain, ModelInfo, Prices
from capstan.runtime.config import API_KEY_VARIABLES, ConfigError, ModelSettings

__all__ = [
    "Profile",
    "ProfileError",
    "ProfileTable",
    "load_profiles",
    "model_chain",
    "model_settings",
    "resolve_profile",
]

Provider = Literal["openai", "anthropic", "local"]
ToolMode = Literal["native", "structured"]
#: Each provider's endpoint when neither the profile nor the environment names one.
DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    # the bundled offline model, served by `capstan model serve` (llama.cpp, OpenAI-compatible)
    "local": "http://127.0.0.1:8765/v1",
}
MAX_CHAIN = 5


class ProfileError(ValueError):
    """A profile that cannot be resolved; the message says what to set."""


class ProfileTable(BaseModel):
    """One `[profiles.NAME]` table."""

    model_config = ConfigDict(extra="forbid")

    provider: Provider
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    prices: Prices = Prices()
    fallback: list[str] = []
    stream: bool = True
    request_timeout: float = 120.0
    tool_mode: ToolMode = "native"


#: What a bare `local:<model>` means: the bundled SmolLM2 on the local llama.cpp server, which
#: rarely emits native tool calls, so tools are asked for as structured JSON output.
LOCAL_DEFAULTS = {
    "context_window": 8192,
    "max_output_tokens": 512,
    "stream": False,
    "tool_mode": "structured",
    "request_timeout": 300.0,
}


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    provider: Provider
    model: str
    base_url: str
    api_key: SecretStr | None = None
    request_timeout: float = 120.0
    stream: bool = True
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    prices: Prices = Prices()
    fallback: tuple[str, ...] = ()
    tool_mode: ToolMode = "native"

    def usable_window_chars(self) -> int:
        """A rough character budget for text sent to this model (4 characters a token)."""
        return max(self.context_window - self.max_output_tokens, 1024) * 3

    def info(self) -> ModelInfo:
        return ModelInfo(
            profile=self.name,
            provider=self.provider,
            model=self.model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            prices=self.prices,
        )


def load_profiles(path: Path | None) -> dict[str, ProfileTable]:
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
        return {n: ProfileTable.model_validate(t) for n, t in data.get("profiles", {}).items()}
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ProfileError(f"profiles file {path} is not usable: {exc}") from exc


def model_settings(env: Mapping[str, str]) -> ModelSettings:
    """The model settings in `env`; a bad value is a `ProfileError` naming the variable."""
    try:
        return ModelSettings.from_env(env)
    except ConfigError as exc:
        raise ProfileError(str(exc)) from None


def resolve_profile(
    name: str,
    env: Mapping[str, str],
    table: Mapping[str, ProfileTable] | None = None,
    settings: ModelSettings | None = None,
) -> Profile:
    """Turn a profile name into provider, model, endpoint, key and limits.

    `env` is the worker's environment, read here only for API keys; every other setting comes
    from `settings` (default: read from `env`)."""
    table = table or {}
    settings = settings or model_settings(env)
    spec = settings.model.strip() if name == "default" else name
    if not spec:
        raise ProfileError(
            "no model configured: set CAPSTAN_MODEL=openai:<model> or anthropic:<model> "
            "(with OPENAI_API_KEY / ANTHROPIC_API_KEY, and OPENAI_BASE_URL for a compatible "
            "server), or name a profile of CAPSTAN_PROFILES"
        )
    if spec in table:
        return _from_table(name, table[spec], env, settings)
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ProfileError(f"model profile {spec!r} is not a known profile nor provider:model")
    if provider not in DEFAULT_BASE_URLS:
        raise ProfileError(
            f"unknown provider {provider!r} in {spec!r}; use openai, anthropic or local"
        )
    extra = LOCAL_DEFAULTS if provider == "local" else {}
    table_entry = ProfileTable(provider=provider, model=model, **extra)
    return _from_table(name, table_entry, env, settings)


def _from_table(
    name: str, t: ProfileTable, env: Mapping[str, str], settings: ModelSettings
) -> Profile:
    key = env.get(t.api_key_env or API_KEY_VARIABLES[t.provider])  # the secret, read at the edge
    base_url = t.base_url or settings.base_url(t.provider) or DEFAULT_BASE_URLS[t.provider]
    timeout = settings.request_timeout
    return Profile(
        name=name,
        provider=t.provider,
        model=t.model,
        base_url=base_url.rstrip("/"),
        api_key=SecretStr(key) if key else None,
        request_timeout=t.request_timeout if timeout is None else timeout,
        stream=t.stream and settings.stream,
        context_window=t.context_window,
        max_output_tokens=t.max_output_tokens,
        prices=t.prices,
        fallback=tuple(t.fallback),
        tool_mode=t.tool_mode,
    )


def model_chain(
    name: str,
    env: Mapping[str, str],
    table: Mapping[str, ProfileTable] | None = None,
    settings: ModelSettings | None = None,
) -> ModelChain:
    """The profile and its fallbacks (transitively, without repeats, at most 5)."""
    settings = settings or model_settings(env)
    order: list[Profile] = []
    queue = [name]
    while queue and len(order) < MAX_CHAIN:
        current = queue.pop(0)
        if any(p.name == current for p in order):
            continue
        profile = resolve_profile(current, env, table, settings)
        order.append(profile)
        queue.extend(profile.fallback)
    return ModelChain(models=tuple(p.info() for p in order))
