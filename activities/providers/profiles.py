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

import difflib
import tomllib
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from capstan.core.models import ModelChain, ModelInfo, Prices
from capstan.runtime.config import API_KEY_VARIABLES, ConfigError, ModelSettings

__all__ = [
    "Profile",
    "ProfileError",
    "ProfileTable",
    "check_profiles",
    "load_profiles",
    "model_chain",
    "model_settings",
    "profile_names",
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
PROVIDERS = tuple(DEFAULT_BASE_URLS)
#: What a bare model name most likely meant, by how its family is named.
_FAMILIES = {"gpt": "openai", "o1": "openai", "o3": "openai", "o4": "openai"}
_FAMILIES |= {"claude": "anthropic", "smollm": "local"}


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

    def info(self, own_queue: bool = False) -> ModelInfo:
        return ModelInfo(
            own_queue=own_queue,
            profile=self.name,
            provider=self.provider,
            model=self.model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            prices=self.prices,
        )


def load_profiles(path: Path | None) -> dict[str, ProfileTable]:
    """The `[profiles.NAME]` tables of the profiles file; a mistake is one line naming it."""
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
        tables = data.get("profiles", {})
        return {str(n): _table(str(n), t) for n, t in tables.items()}
    except OSError as exc:
        problem = exc.strerror or str(exc)
    except tomllib.TOMLDecodeError as exc:
        problem = f"not valid TOML: {exc}"
    except AttributeError:
        problem = "`profiles` is not a table of `[profiles.NAME]` tables"
    except ProfileError as exc:
        problem = str(exc)
    raise ProfileError(f"CAPSTAN_PROFILES={path}: the profiles file is not usable: {problem}")


def profile_names(path: Path | None) -> list[str]:
    """The names of the profiles file's profiles (a `ConfigError` line if it is not usable)."""
    try:
        return list(load_profiles(path))
    except ProfileError as exc:
        raise ConfigError(str(exc)) from None


def _table(name: str, raw: object) -> ProfileTable:
    try:
        return ProfileTable.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            field = ".".join(str(part) for part in error["loc"]) or "table"
            hint = _did_you_mean(error.get("input"), PROVIDERS) if field == "provider" else ""
            problems.append(f"{field}: {error['msg']}{hint}")
        raise ProfileError(f"profile {name}: {'; '.join(problems)}") from None


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
        raise ProfileError(
            f"model profile {spec!r} is not a known profile nor provider:model"
            f"{_did_you_mean(spec, table) or _guess_provider(spec)}"
        )
    if provider not in DEFAULT_BASE_URLS:
        raise ProfileError(
            f"unknown provider {provider!r} in {spec!r}{_did_you_mean(provider, PROVIDERS)}; "
            "use openai, anthropic or local"
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
    limited: Collection[str] = (),
) -> ModelChain:
    """The profile and its fallbacks (transitively, without repeats, at most 5). Those named in
    `limited` (`[limits.NAME]`) have their calls on a queue of their own (`ModelInfo.own_queue`)."""
    order = _chain(name, env, table or {}, settings or model_settings(env))
    return ModelChain(models=tuple(p.info(own_queue=p.name in limited) for p in order))


def check_profiles(env: Mapping[str, str], *, local_available: bool) -> list[str]:
    """Resolve, when the worker starts, what a run may name: the `default` profile
    (`CAPSTAN_MODEL`) and every profile of the profiles file, each with its fallbacks. A profile
    that cannot resolve is a `ProfileError` line naming the variable or profile; what only may
    go wrong is returned as warnings. `local_available`: the `local` extra is installed."""
    settings = model_settings(env)
    table = load_profiles(settings.profiles_file)
    warnings = []
    if not settings.model.strip() and not local_available:
        warnings.append(
            "no default model (CAPSTAN_MODEL is not set): a run that names no model fails; set "
            "CAPSTAN_MODEL=openai:<model>, anthropic:<model> or a profile of CAPSTAN_PROFILES, "
            "or pip install 'capstan[local]' for the bundled one"
        )
    names = (["default"] if settings.model.strip() else []) + list(table)
    for name in names:
        where = (
            f"CAPSTAN_MODEL={settings.model}"
            if name == "default"
            else f"CAPSTAN_PROFILES={settings.profiles_file}: profile {name}"
        )
        try:
            for profile in _chain(name, env, table, settings):
                _check_local(profile, local_available)
        except ProfileError as exc:
            raise ProfileError(f"{where}: {exc}") from None
    return warnings


def _chain(
    name: str, env: Mapping[str, str], table: Mapping[str, ProfileTable], settings: ModelSettings
) -> list[Profile]:
    order: list[Profile] = []
    queue = [name]
    while queue and len(order) < MAX_CHAIN:
        current = queue.pop(0)
        if all(p.name != current for p in order):
            order.append(resolve_profile(current, env, table, settings))
            queue.extend(order[-1].fallback)
    return order


def _check_local(profile: Profile, ready: bool) -> None:
    """A `local` profile on the default endpoint needs the bundled model server."""
    if profile.provider != "local" or ready or profile.base_url != DEFAULT_BASE_URLS["local"]:
        return
    raise ProfileError(
        f"model {profile.model!r} of the local provider needs the bundled model: "
        "pip install 'capstan[local]' (or set CAPSTAN_LOCAL_MODEL_URL to a server of it)"
    )


def _did_you_mean(word: object, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _guess_provider(spec: str) -> str:
    for family, provider in _FAMILIES.items():
        if spec.lower().startswith(family):
            return f" (did you mean {provider}:{spec}?)"
    return "; write provider:model, e.g. openai:gpt-4o-mini"
