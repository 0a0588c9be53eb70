"""Who is calling: bearer tokens mapped to an identity, scopes and a tenant.

A tokens file (TOML, `CAPSTAN_API_TOKENS_FILE`) lists the tokens a server accepts:

    [[token]]
    sha256 = "9f86d08…"          # sha256 (hex) of the token; or `token = "…"` in plain text
    identity = "alice@example.com"
    tenant = "acme"
    scopes = ["read", "approve"]

`CAPSTAN_API_TOKEN` adds one token with every scope (for a single-user set-up). The identity is
what every decision sent with the token records as its sender; the tenant decides which runs it
sees. Scopes: `read` (status, transcripts, events, audits), `steer` (start runs, pause, resume,
send, cancel, grants), `approve` (decide approvals, answer questions), `admin` (all of them, and
starting runs that weaken the gate). Tokens are kept only as their sha256, so a token is never
held in memory in plain text after loading and lookups take the same time whatever it says.

The browser inbox signs in once with a token, kept in an HttpOnly, SameSite=Lax cookie. A
request that changes anything with that cookie, and the sign-in form itself, must come from
this server's own pages: its `Origin` (or, when a browser sends none, its `Referer`) names this
server (`same_origin`), and both missing is a refusal. Without that check on the sign-in, a
form on any site could sign a browser in as the attacker's identity (login CSRF): the reviewer
would then approve in someone else's name. A cookie-authenticated write must also carry the
`X-Capstan-Request` header, which no other site can send without CORS (never granted here).

SameSite=Lax rather than Strict: every state change is already refused unless it comes from
this server's pages (above), and Lax still keeps the cookie off every cross-site request but a
top-level GET navigation, which is what a link in a notification (`CAPSTAN_INBOX_URL`) is:
with Strict such a link opens the sign-in page although the reviewer is signed in. GETs change
nothing here, and the pages refuse to be framed (`frame-ancestors 'none'`).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from capstan.api.errors import ApiError
from capstan.core.strict import StrictModel
from capstan.core.tenants import TENANT_PATTERN
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.environment import ConfigError

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "Principal",
    "Scope",
    "TokenStore",
    "check_page_write",
    "digest",
    "load_tokens",
    "require",
    "same_origin",
]

COOKIE = "capstan_token"
CSRF_HEADER = "X-Capstan-Request"
MIN_TOKEN_CHARS = 16
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Scope(StrEnum):
    READ = "read"
    STEER = "steer"
    APPROVE = "approve"
    ADMIN = "admin"


class Principal(BaseModel):
    """The caller behind a token."""

    model_config = ConfigDict(frozen=True)

    identity: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    scopes: frozenset[Scope]

    def may(self, scope: Scope) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes


class _TokenEntry(StrictModel):
    token: str | None = Field(None, min_length=MIN_TOKEN_CHARS)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    identity: str = Field(min_length=1)
    #: no `:` or `/`: a tenant's threads and workspace are named from it (capstan.core.tenants)
    tenant: str = Field("default", pattern=TENANT_PATTERN)
    scopes: frozenset[Scope] = frozenset({Scope.READ})


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """Token digests → principals."""

    def __init__(self, principals: Mapping[str, Principal]) -> None:
        self._by_digest = dict(principals)

    def __len__(self) -> int:
        return len(self._by_digest)

    def find(self, token: str) -> Principal | None:
        return self._by_digest.get(digest(token))


def load_tokens(settings: ApiSettings) -> TokenStore:
    """The tokens file plus `CAPSTAN_API_TOKEN`; a bad file is one `ConfigError` line."""
    principals: dict[str, Principal] = {}
    if settings.tokens_file is not None:
        principals.update(_read_file(settings.tokens_file))
    if settings.token is not None:
        secret = settings.token.get_secret_value()
        if len(secret) < MIN_TOKEN_CHARS:
            raise ConfigError(f"CAPSTAN_API_TOKEN: use at least {MIN_TOKEN_CHARS} characters")
        principals[digest(secret)] = Principal(
            identity=settings.token_identity,
            tenant=settings.token_tenant,
            scopes=frozenset({Scope.ADMIN}),
        )
    if not principals:
        raise ConfigError(
            "the HTTP server needs tokens: set CAPSTAN_API_TOKENS_FILE (TOML) or CAPSTAN_API_TOKEN"
        )
    return TokenStore(principals)


def _read_file(path: Path) -> dict[str, Principal]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"tokens file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"tokens file {path}: not valid TOML ({exc})") from None
    out: dict[str, Principal] = {}
    for n, item in enumerate(raw.get("token", [])):
        try:
            entry = _TokenEntry.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problem = f"token {n + 1}: {where}: {first['msg']}"
            raise ConfigError(f"tokens file {path}: {problem}") from None
        if (entry.token is None) == (entry.sha256 is None):
            raise ConfigError(f"tokens file {path}: token {n + 1}: give `token` or `sha256`")
        key = entry.sha256 or digest(entry.token or "")
        out[key] = Principal(identity=entry.identity, tenant=entry.tenant, scopes=entry.scopes)
    return out


_bearer = HTTPBearer(auto_error=False, description="a token from the server's tokens file")


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def _site(scheme: str, netloc: str) -> str:
    """`host[:port]` in lower case, without the scheme's default port."""
    netloc = netloc.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    return netloc.removesuffix(default) if default else netloc


def _trusted_sites(request: Request) -> set[str]:
    """The sites this server's pages are served from: the host the request was sent to, and
    `CAPSTAN_INBOX_URL` (the public address behind a proxy that rewrites `Host`)."""
    host = request.headers.get("host", "").lower()
    sites = {host.removesuffix(":80"), host.removesuffix(":443")} if host else set()
    inbox = getattr(request.app.state.backend.settings, "inbox_url", None)
    if inbox:
        parts = urlsplit(inbox)
        sites.add(_site(parts.scheme, parts.netloc))
    return sites


def same_origin(request: Request) -> bool:
    """The request comes from a page of this server: its `Origin` names this server, or it has
    no `Origin` and its `Referer` does. Neither (or `Origin: null`, an opaque origin) is False."""
    source = request.headers.get("origin")
    if source is None:
        source = request.headers.get("referer")
    if not source:
        return False
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return _site(parts.scheme, parts.netloc) in _trusted_sites(request)


def check_page_write(request: Request) -> None:
    """A cookie-authenticated write: with the page's header, from this server's pages."""
    if CSRF_HEADER.lower() not in request.headers:
        raise ApiError(403, "forbidden", f"a signed-in page must send {CSRF_HEADER}")
    if not same_origin(request):
        raise ApiError(
            403,
            "forbidden",
            "a signed-in page's request must come from this server's own pages "
            "(its Origin or Referer names another site, or neither was sent)",
        )


def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    """The principal of a request, from its bearer token or the inbox's cookie."""
    store: TokenStore = request.app.state.tokens
    if credentials is not None:
        token = credentials.credentials
    elif (cookie := request.cookies.get(COOKIE)) is not None:
        if request.method not in _SAFE_METHODS:
            check_page_write(request)
        token = cookie
    else:
        raise _unauthorized("no bearer token: send `Authorization: Bearer TOKEN`")
    principal = store.find(token)
    if principal is None:
        raise _unauthorized("the bearer token is not valid")
    return principal


def require(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency: the caller, who must hold `scope`."""

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        principal = authenticate(request, credentials)
        if not principal.may(scope):
            raise ApiError(403, "forbidden", f"this token lacks the {scope.value!r} scope")
        return principal

    return dependency
