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
secret. `X-Capstan-Delivery` (run id and request id, also the body's `delivery`) is the same for
every attempt and every continued execution of a run, and so is the body.

Receiving (`verify_delivery`, or `verify_signature` for a yes or no): recompute the signature
over the raw bytes and compare in constant time; refuse a timestamp more than `tolerance`
seconds from the receiver's clock (`STALE`); refuse a body accepted before within that window
(`REPLAYED`: a replayed request, or Capstan's retry of a delivery the receiver already took),
remembered in a `DeliveryStore`. The built-in one (`SeenDeliveries`) is bounded and lives in the
receiver's process: a receiver with several processes passes one store they share. Only
authentic requests are remembered, so a forger cannot fill it; a full store refuses (`BUSY`)
rather than forget a delivery still inside its window. The header `X-Capstan-Delivery` is not
signed: dedupe by the signed body (as these do), never by the header alone.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import tomllib
from collections import OrderedDict
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Literal, Protocol, get_args
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capstan.core.notifications import NotifyKind
from capstan.core.strict import StrictModel
from capstan.runtime.environment import ConfigError, validation_summary

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "DeliveryStore",
    "Hook",
    "SeenDeliveries",
    "Verdict",
    "WebhookConfig",
    "load_webhooks",
    "sign",
    "verify_delivery",
    "verify_signature",
]

SIGNATURE_HEADER = "X-Capstan-Signature"
TIMESTAMP_HEADER = "X-Capstan-Timestamp"
DELIVERY_HEADER = "X-Capstan-Delivery"
EVENT_HEADER = "X-Capstan-Event"
#: a signed request older (or newer) than this many seconds is refused by `verify_signature`
DEFAULT_TOLERANCE = 300
#: how many deliveries `SeenDeliveries` remembers at most (each for its window)
SEEN_CAPACITY = 10_000
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class Hook(StrictModel):
    """One webhook. Exactly one of `url` / `url_env`; at most one of `secret_env` /
    `secret_file`; a `json` hook must be signed."""

    model_config = ConfigDict(frozen=True)

    name: str
    url: str | None = None
    url_env: str | None = None
    secret_env: str | None = None
    secret_file: Path | None = None
    format: Literal["json", "slack"] = "json"
    events: tuple[NotifyKind, ...] = ("approval", "question")
    #: seconds for a whole POST (connect, write, read); hooks are posted in parallel within the
    #: activity's 20 s, each reading at most a few KiB of the answer
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

    def tokens(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """What no log line or error may show: the secret and every part of the URL that can
        carry a token (user, password, path, query and fragment, raw and decoded)."""
        out: list[str] = []
        try:
            secret = self.resolve_secret(env)
        except ConfigError:
            secret = None
        if secret is not None:
            out.append(secret.decode(errors="replace"))
        try:
            parts = urlsplit(self.resolve_url(env))
        except (ConfigError, ValueError):
            return tuple(out)
        pieces = [parts.username, parts.password, parts.path, parts.query, parts.fragment]
        pieces += parts.query.split("&") + [p.partition("=")[2] for p in parts.query.split("&")]
        pieces += parts.path.split("/")
        out += [p for piece in pieces if piece for p in {piece, unquote(piece)}]
        return tuple(out)

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


class Verdict(StrEnum):
    """What `verify_delivery` makes of a received request."""

    ACCEPTED = "accepted"
    FORGED = "forged"  # no valid signature under the secret
    STALE = "stale"  # its timestamp is outside the tolerance window
    REPLAYED = "replayed"  # this body was accepted before, within the window
    BUSY = "busy"  # the store is full of deliveries still inside their window


class DeliveryStore(Protocol):
    """Where a receiver remembers the deliveries it accepted (share one between processes)."""

    def first_time(self, key: str, expires: float, now: float) -> bool | None:
        """Remember `key` until `expires`: True if it was not there, False if it was, None
        when there is no room left for it."""


class SeenDeliveries:
    """A bounded, thread-safe `DeliveryStore` in memory: at most `capacity` keys, each
    forgotten once its window has passed."""

    def __init__(self, capacity: int = SEEN_CAPACITY) -> None:
        self.capacity = capacity
        self._expires: OrderedDict[str, float] = OrderedDict()  # in order of expiry, roughly
        self._lock = threading.Lock()

    def first_time(self, key: str, expires: float, now: float) -> bool | None:
        with self._lock:
            while self._expires:
                old, until = next(iter(self._expires.items()))
                if until >= now:
                    break
                del self._expires[old]
            if key in self._expires:
                return False
            if len(self._expires) >= self.capacity:
                self._purge(now)
                if len(self._expires) >= self.capacity:
                    return None
            self._expires[key] = expires
            return True

    def _purge(self, now: float) -> None:
        for old in [k for k, until in self._expires.items() if until < now]:
            del self._expires[old]


#: the store `verify_delivery` uses when it is given none: this process's memory
_SEEN = SeenDeliveries()


def verify_delivery(
    secret: bytes,
    body: bytes,
    signature: str,
    timestamp: str,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
    seen: DeliveryStore | None = None,
) -> Verdict:
    """Check a received request: `signature` and `timestamp` are the headers' values, `body`
    the raw bytes, `now` the receiver's Unix time. An accepted body is remembered (in `seen`,
    or this process's `SeenDeliveries`) until its timestamp leaves the window, and refused as
    `REPLAYED` until then. Answer a `REPLAYED` delivery 2xx if it should not be retried."""
    try:
        sent = int(timestamp)
    except ValueError:
        return Verdict.FORGED
    if not hmac.compare_digest(sign(secret, sent, body), signature):
        return Verdict.FORGED
    if abs(now - sent) > tolerance:
        return Verdict.STALE
    store = _SEEN if seen is None else seen
    key = hashlib.sha256(body).hexdigest()  # signed, unlike the delivery header
    fresh = store.first_time(key, sent + tolerance, now)
    if fresh is None:
        return Verdict.BUSY
    return Verdict.ACCEPTED if fresh else Verdict.REPLAYED


def verify_signature(
    secret: bytes,
    body: bytes,
    signature: str,
    timestamp: str,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
    seen: DeliveryStore | None = None,
) -> bool:
    """Whether a received request is authentic, fresh and not seen before: `verify_delivery`
    is `ACCEPTED` (which remembers it)."""
    verdict = verify_delivery(
        secret, body, signature, timestamp, now=now, tolerance=tolerance, seen=seen
    )
    return verdict is Verdict.ACCEPTED
