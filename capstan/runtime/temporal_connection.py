"""The Temporal connection, resolved exactly as the `temporal` CLI resolves it.

`temporalio.envconfig` reads the profile file (`TEMPORAL_CONFIG_FILE`, by default
`~/.config/temporalio/temporal.toml`), picks the profile `TEMPORAL_PROFILE` (default `default`)
and applies `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS`,
`TEMPORAL_TLS_{SERVER_CA_CERT,CLIENT_CERT,CLIENT_KEY}_{PATH,DATA}`, `TEMPORAL_TLS_SERVER_NAME`
and `TEMPORAL_GRPC_META_*` over it. An API key turns TLS on with the system's roots, as it does
for the CLI. This module turns the result into typed settings (the API key and inline key data
as secrets, so a printed `Settings` shows none) and into `Client.connect` options, and turns
every failure — a malformed file, an unknown profile, an unreadable certificate, a handshake
that fails — into one line naming what is wrong. It chooses no server: with no address
configured anywhere the caller uses the embedded default.

One difference from the CLI: `TEMPORAL_TLS_DISABLE_HOST_VERIFICATION=true` is refused with a
clear error, because the Python SDK cannot skip certificate verification; set
`TEMPORAL_TLS_SERVER_NAME` to a name the server's certificate carries instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, SecretStr
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS
from temporalio.service import TLSConfig

from capstan.core.errors import ConnectError
from capstan.runtime.environment import ConfigError

__all__ = [
    "PemSource",
    "TemporalAccess",
    "TemporalConnectError",
    "TemporalProfile",
    "TemporalTLS",
    "explain_connect_failure",
    "load_temporal_profile",
]

_TRUE, _FALSE = {"1", "true"}, {"0", "false"}
_ROLES = {  # field -> (variable stem, what it is)
    "server_ca_cert": ("TEMPORAL_TLS_SERVER_CA_CERT", "server CA certificate"),
    "client_cert": ("TEMPORAL_TLS_CLIENT_CERT", "client certificate"),
    "client_key": ("TEMPORAL_TLS_CLIENT_KEY", "client key"),
}


class TemporalConnectError(ConnectError):
    """Temporal could not be reached or refused the connection; the message is one line."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable  # nothing answered at all (vs. TLS or auth failed)


class PemSource(BaseModel):
    """A certificate or key: a file, or inline PEM data; `origin` says where it was set."""

    model_config = ConfigDict(frozen=True)

    path: Path | None = None
    data: SecretBytes | None = None
    origin: str = ""
    what: str = "certificate"

    def read(self) -> bytes:
        """The PEM bytes; an unreadable file or non-PEM content is a `ConfigError`."""
        if self.path is not None:
            try:
                content = self.path.read_bytes()
            except OSError as exc:
                raise ConfigError(
                    f"{self.what} {self.path} ({self.origin}) cannot be read: {exc.strerror}"
                ) from None
        else:
            content = self.data.get_secret_value() if self.data else b""
        if b"-----BEGIN " not in content:
            where = f"{self.path} ({self.origin})" if self.path else f"from {self.origin}"
            raise ConfigError(f"{self.what} {where} is not PEM")
        return content


class TemporalTLS(BaseModel):
    """TLS as configured: on unless `enabled` is false; certificates are read at connect time,
    so rotated files are picked up by the next connection."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    server_name: str | None = None
    server_ca_cert: PemSource | None = None
    client_cert: PemSource | None = None
    client_key: PemSource | None = None

    def config(self) -> TLSConfig:
        if self.client_cert is not None and self.client_key is None:
            raise ConfigError(
                f"a TLS client certificate is set ({self.client_cert.origin}) but no client "
                "key: set TEMPORAL_TLS_CLIENT_KEY_PATH (or _DATA) too"
            )
        if self.client_key is not None and self.client_cert is None:
            raise ConfigError(
                f"a TLS client key is set ({self.client_key.origin}) but no client "
                "certificate: set TEMPORAL_TLS_CLIENT_CERT_PATH (or _DATA) too"
            )
        return TLSConfig(
            domain=self.server_name,
            server_root_ca_cert=self.server_ca_cert.read() if self.server_ca_cert else None,
            client_cert=self.client_cert.read() if self.client_cert else None,
            client_private_key=self.client_key.read() if self.client_key else None,
        )

    def describe_ca(self) -> str:
        ca = self.server_ca_cert
        if ca is None:
            return "the system's trusted roots"
        return f"{ca.path} ({ca.origin})" if ca.path else f"the CA from {ca.origin}"


class TemporalAccess(BaseModel):
    """How to authenticate and encrypt, beside the address and namespace."""

    model_config = ConfigDict(frozen=True)

    api_key: SecretStr | None = None
    tls: TemporalTLS | None = None
    grpc_meta: dict[str, str] = Field(default_factory=dict, repr=False)  # may carry credentials
    profile: str = "default"

    @property
    def uses_tls(self) -> bool:
        return self.tls.enabled if self.tls is not None else self.api_key is not None

    def tls_option(self) -> bool | TLSConfig:
        """`Client.connect(tls=...)`: envconfig's rule — explicit TLS settings win, an API key
        alone means TLS with the system's roots."""
        if self.tls is None:
            return self.api_key is not None
        return self.tls.config() if self.tls.enabled else False


class TemporalProfile(BaseModel):
    """What envconfig resolved: address and namespace (None where nothing set them)."""

    address: str | None = None
    namespace: str | None = None
    access: TemporalAccess = TemporalAccess()


def _check_variables(env: Mapping[str, str]) -> None:
    tls = env.get("TEMPORAL_TLS")
    if tls is not None and tls.lower() not in _TRUE | _FALSE:
        raise ConfigError(f"TEMPORAL_TLS={tls}: use true or false")
    skip = env.get("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "false").lower()
    if skip not in _FALSE:
        raise ConfigError(
            f"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION={skip}: the Temporal Python SDK cannot skip "
            "certificate verification; set TEMPORAL_TLS_SERVER_NAME to a name in the server's "
            "certificate (and TEMPORAL_TLS_SERVER_CA_CERT_PATH to its CA) instead"
        )
    config_file = env.get("TEMPORAL_CONFIG_FILE")
    if config_file is not None and not Path(config_file).is_file():
        raise ConfigError(f"TEMPORAL_CONFIG_FILE={config_file}: no such file")


def _profile_file(env: Mapping[str, str]) -> str:
    return env.get("TEMPORAL_CONFIG_FILE", "the temporal.toml profile file")


def _load_failure(exc: RuntimeError, env: Mapping[str, str]) -> ConfigError:
    """envconfig's error (a TOML parse error spans several lines) as one line."""
    lines = [
        line.strip()
        for line in str(exc).splitlines()
        if line.strip() and not re.match(r"^\s*(\d+\s*)?\|", line)
    ]
    detail = ": ".join(lines).removeprefix("Configuration loading error: ")
    profile = env.get("TEMPORAL_PROFILE")
    if profile and "not found" in detail:
        return ConfigError(f"TEMPORAL_PROFILE={profile}: no such profile in {_profile_file(env)}")
    return ConfigError(f"Temporal client configuration ({_profile_file(env)}): {detail}")


def _pem(
    field: str, source: Path | str | bytes | None, env: Mapping[str, str], profile: str
) -> PemSource | None:
    if source is None:
        return None
    stem, what = _ROLES[field]
    kind = "PATH" if isinstance(source, Path) else "DATA"
    variable = f"{stem}_{kind}"
    origin = (
        variable
        if variable in env
        else f"{field}_{kind.lower()} of profile {profile!r} in {_profile_file(env)}"
    )
    if isinstance(source, Path):
        return PemSource(path=source, origin=origin, what=what)
    data = source.encode() if isinstance(source, str) else source
    return PemSource(data=SecretBytes(data), origin=origin, what=what)


def _tls(tls: ClientConfigTLS | None, env: Mapping[str, str], profile: str) -> TemporalTLS | None:
    if tls is None:
        return None
    return TemporalTLS(
        enabled=tls.disabled is not True,
        server_name=tls.server_name,
        server_ca_cert=_pem("server_ca_cert", tls.server_root_ca_cert, env, profile),
        client_cert=_pem("client_cert", tls.client_cert, env, profile),
        client_key=_pem("client_key", tls.client_private_key, env, profile),
    )


def load_temporal_profile(env: Mapping[str, str]) -> TemporalProfile:
    """Resolve the connection from `env` and the profile file, as the `temporal` CLI does.
    An empty variable counts as unset."""
    env = {name: value for name, value in env.items() if value != ""}
    _check_variables(env)
    try:
        loaded = ClientConfigProfile.load(override_env_vars=env)
    except RuntimeError as exc:  # envconfig's ConfigError
        raise _load_failure(exc, env) from None
    name = env.get("TEMPORAL_PROFILE", "default")
    access = TemporalAccess(
        api_key=SecretStr(loaded.api_key) if loaded.api_key else None,
        tls=_tls(loaded.tls, env, name),
        grpc_meta=dict(loaded.grpc_meta),
        profile=name,
    )
    return TemporalProfile(
        address=loaded.address or None, namespace=loaded.namespace or None, access=access
    )


_UNREACHABLE = ("tcp connect error", "dns error", "Connection refused", "No route to host")
# the peer hung up during the first call (seen as either, depending on timing)
_CLOSED = ("transport error", "connection closed", "operation was canceled")


def explain_connect_failure(
    address: str, access: TemporalAccess, exc: BaseException
) -> TemporalConnectError:
    """The Temporal core's error (a Rust debug dump) as one line that says what to change."""
    text = str(exc)
    tls = access.tls or TemporalTLS()
    name = re.search(r'expected: DnsName\("([^"]+)"\)', text)
    if isinstance(exc, TimeoutError) or any(marker in text for marker in _UNREACHABLE):
        return TemporalConnectError(f"no Temporal server answers at {address}", unreachable=True)
    if "UnknownIssuer" in text:
        message = (
            f"the TLS certificate of {address} is not signed by {tls.describe_ca()}: set "
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed the server's certificate"
        )
    elif "NotValidForName" in text:
        wanted = name.group(1) if name else tls.server_name or address
        message = (
            f"the TLS certificate of {address} is not valid for the name {wanted}: set "
            "TEMPORAL_TLS_SERVER_NAME to a name the certificate carries"
        )
    elif "InvalidContentType" in text or "InvalidMessage" in text:
        message = (
            f"{address} does not speak TLS: set TEMPORAL_TLS=false (or remove the TLS settings)"
        )
    elif "PrivateKeyParseError" in text:
        origin = tls.client_key.origin if tls.client_key else "TEMPORAL_TLS_CLIENT_KEY_PATH"
        message = f"the TLS client key ({origin}) is not a usable private key"
    elif any(marker in text for marker in _CLOSED) and access.uses_tls:
        message = (
            f"{address} closed the TLS connection: it may require a client certificate "
            "(TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH) or not speak TLS"
        )
    elif any(marker in text for marker in _CLOSED):
        message = f"{address} closed the connection: it may require TLS (TEMPORAL_TLS=true)"
    else:
        message = f"cannot connect to Temporal at {address}: {_last_words(text)}"
    return TemporalConnectError(message)


def _last_words(text: str) -> str:
    """The innermost readable message of a nested Rust error, on one line."""
    quoted = re.findall(r'message: "([^"]+)"', text)
    detail = quoted[-1] if quoted else text.removeprefix("Failed client connect: ")
    return " ".join(detail.split())[:300]
