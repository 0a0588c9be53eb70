"""The worker's webhooks (`CAPSTAN_WEBHOOKS=webhooks.toml`) and how their requests are signed.

Example file::

    [hooks.reviewers]
    url = "https://ops.example.com/capstan"     # or url_env = "REVIEW_HOOK_URL"
    secret_env = "REVIEW_HOOK_SECRET"           # or secret_file = "/run/secrets/review-hook"
    format = "json"                             # or "slack": {"text": ..., "blocks": [...]}
    events = ["approval", "question"]           # the default: both

    [hooks.slack]
    url_env = "SLACK_WEBHOOK_URL"               # a Slack incoming-webhook URL is a secret too
    format = "slack"

Only the `notify_request` activity reads secrets and URLs, from the worker's environment or
files, at the moment it posts: no secret or hook URL reaches a workflow input or history. Errors
name the hook and its host, never its URL (which may carry a token) or its secret.

Signing: with a secret, each POST carries `X-Capstan-Timestamp` (Unix seconds) and
`X-Capstan-Signature: sha256=<hex>`, the HMAC-SHA256 of `<timestamp>.<raw body>` under the
secret. A receiver recomputes it over the raw bytes, compares in constant time and refuses a
timestamp older than a few minutes (a replayed request): `verify_signature` does all three.
`X-Capstan-Delivery` (run id and request id) is the same for every attempt and every continued
execution of a run: receivers dedupe by it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capstan.core.notify import NotifyKind
from capstan.runtime.environment import ConfigError, validation_summary

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Hook",
    "WebhookConfig",
    "load_webhooks",
    "sign",
    "verify_signature",
]

SIGNATURE_HEADER = "X-Capstan-Signature"
TIMESTAMP_HEADER = "X-Capstan-Timestamp"
DELIVERY_HEADER = "X-Capstan-Delivery"
EVENT_HEADER = "X-Capstan-Event"
#: a signed request older (or newer) than this many seconds is refused by `verify_signature`
DEFAULT_TOLERANCE = 300
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class Hook(BaseModel):
    """One webhook. Exactly one of `url` / `url_env`; at most one of `secret_env` /
    `secret_file`; a `json` hook must be signed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    url: str | None = None
    url_env: str | None = None
    secret_env: str | None = None
    secret_file: Path | None = None
    format: Literal["json", "slack"] = "json"
    events: tuple[NotifyKind, ...] = ("approval", "question")
    #: seconds per POST; hooks are posted in parallel within the activity's 20 s
    timeout: float = Field(10.0, gt=0, le=15)

    @model_validator(mode="after")
    def _one_of_each(self) -> Hook:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("needs exactly one of `url` or `url_env`")
        if self.secret_env is not None and self.secret_file is not None:
            raise ValueError("takes `secret_env` or `secret_file`, not both")
        if self.format == "json" and self.secret_env is None and self.secret_file is None:
            raise ValueError("a json hook needs `secret_env` or `secret_file` (it is signed)")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError("`url` must be http(s)")
        return self

    def resolve_url(self, env: Mapping[str, str]) -> str:
        """The URL; `ConfigError` when its variable is unset."""
        if self.url is not None:
            return self.url
        assert self.url_env is not None
        url = env.get(self.url_env, "")
        if not url:
            raise ConfigError(f"webhook {self.name}: {self.url_env} is not set")
        return url

    def resolve_secret(self, env: Mapping[str, str]) -> bytes | None:
        """The signing secret, read now (files may be rotated); `ConfigError` when missing."""
        if self.secret_env is not None:
            value = env.get(self.secret_env, "")
            if not value:
                raise ConfigError(f"webhook {self.name}: {self.secret_env} is not set")
            return value.encode()
        if self.secret_file is not None:
            try:
                data = self.secret_file.read_bytes().strip()
            except OSError as exc:
                raise ConfigError(
                    f"webhook {self.name}: its secret file cannot be read: {exc.strerror}"
                ) from None
            if not data:
                raise ConfigError(f"webhook {self.name}: its secret file is empty")
            return data
        return None

    def where(self, env: Mapping[str, str]) -> str:
        """The hook as logs and errors name it: its name and host, never the full URL."""
        try:
            host = urlsplit(self.resolve_url(env)).hostname or "?"
        except ConfigError:
            host = "?"
        return f"{self.name} ({host})"


class WebhookConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    hooks: tuple[Hook, ...] = ()

    def kinds(self) -> tuple[NotifyKind, ...]:
        """The kinds of opened request at least one hook wants, in `NotifyKind`'s order."""
        wanted = {kind for hook in self.hooks for kind in hook.events}
        return tuple(k for k in get_args(NotifyKind) if k in wanted)

    def problems(self, env: Mapping[str, str]) -> list[str]:
        """What is missing in `env` (or the secret files) for each hook to post."""
        out = []
        for hook in self.hooks:
            try:
                hook.resolve_url(env)
                hook.resolve_secret(env)
            except ConfigError as exc:
                out.append(str(exc))
        return out


def load_webhooks(path: Path | None, env: Mapping[str, str] | None = None) -> WebhookConfig:
    """Read `CAPSTAN_WEBHOOKS`; with `env`, also check that every URL and secret resolves.
    Anything wrong is one `ConfigError` line naming the file."""
    if path is None:
        return WebhookConfig()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        config = _parse(data)
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"is not valid TOML: {exc}"
    except ValidationError as exc:
        problem = f"has an invalid hook: {validation_summary(exc)}"
    except ValueError as exc:
        problem = str(exc)
    else:
        missing = config.problems(env) if env is not None else []
        if not missing:
            return config
        problem = "; ".join(missing)
    raise ConfigError(f"CAPSTAN_WEBHOOKS={path}: {problem}")


def _parse(data: dict[str, object]) -> WebhookConfig:
    unknown = sorted(set(data) - {"hooks"})
    if unknown:
        raise ValueError(f"has unknown top-level keys {unknown}: hooks go in [hooks.NAME]")
    tables = data.get("hooks", {})
    if not isinstance(tables, dict):
        raise ValueError("is not a table of [hooks.NAME]")
    hooks = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ValueError(f"[hooks.{name}] is not a table")
        if not _NAME.fullmatch(name):
            raise ValueError(f"hook name {name!r} must be letters, digits, '-' and '_'")
        hooks.append(Hook.model_validate({**table, "name": name}))
    return WebhookConfig(hooks=tuple(hooks))


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The `X-Capstan-Signature` value of `body` sent at `timestamp`."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    secret: bytes,
    body: bytes,
    signature: str,
    timestamp: str,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> bool:
    """Whether a received request is authentic and fresh: `signature` and `timestamp` are the
    headers' values, `body` the raw bytes, `now` the receiver's Unix time."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, sent, body), signature)
