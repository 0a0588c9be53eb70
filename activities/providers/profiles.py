"""Model profiles: a name in the run spec, everything else from the worker's environment.

`default` means whatever `CAPSTAN_MODEL` names; `openai:<model>` speaks the OpenAI chat
completions API at `OPENAI_BASE_URL` with `OPENAI_API_KEY`. Keys are read here, inside the
activity, so they never enter a workflow input or history.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, SecretStr

__all__ = ["Profile", "ProfileError", "resolve_profile"]

OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
SUPPORTED = ("openai",)


class ProfileError(ValueError):
    """A profile that cannot be resolved; the message says what to set."""


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    provider: str
    model: str
    base_url: str
    api_key: SecretStr | None = None
    request_timeout: float = 120.0


def resolve_profile(name: str, env: Mapping[str, str]) -> Profile:
    """Turn a profile name into provider, model, endpoint and key."""
    spec = env.get("CAPSTAN_MODEL", "").strip() if name == "default" else name
    if not spec:
        raise ProfileError(
            "no model configured: set CAPSTAN_MODEL=openai:<model> "
            "(and OPENAI_API_KEY, plus OPENAI_BASE_URL for a compatible server)"
        )
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ProfileError(f"model profile {spec!r} is not of the form provider:model")
    if provider not in SUPPORTED:
        raise ProfileError(f"unknown provider {provider!r} in {spec!r}; supported: {SUPPORTED}")
    key = env.get("OPENAI_API_KEY")
    return Profile(
        name=name,
        provider=provider,
        model=model,
        base_url=env.get("OPENAI_BASE_URL", OPENAI_DEFAULT_BASE).rstrip("/"),
        api_key=SecretStr(key) if key else None,
        request_timeout=float(env.get("CAPSTAN_MODEL_TIMEOUT", "120")),
    )
