"""The settings of `capstan serve`, read from its environment (beside the shared `Settings`).

Edge module: only `capstan serve` and tests build these. Tokens are not settings: the file (or
the one token from the environment) is read by `capstan.api.auth`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from capstan.core.tenants import TENANT_PATTERN
from capstan.runtime.environment import EnvSettings

__all__ = ["DEFAULT_API_PORT", "ApiSettings"]

DEFAULT_API_PORT = 8700


class ApiSettings(EnvSettings):
    """Where `capstan serve` listens, who may call it, and what it refuses."""

    host: str = Field("127.0.0.1", validation_alias="CAPSTAN_API_HOST")
    port: int = Field(DEFAULT_API_PORT, validation_alias="CAPSTAN_API_PORT", ge=0, le=65535)
    #: a TOML file of bearer tokens (see `capstan.api.auth`)
    tokens_file: Path | None = Field(None, validation_alias="CAPSTAN_API_TOKENS_FILE")
    #: one bearer token from the environment, with every scope, for a single-user set-up
    token: SecretStr | None = Field(None, validation_alias="CAPSTAN_API_TOKEN")
    token_identity: str = Field("api", validation_alias="CAPSTAN_API_TOKEN_IDENTITY")
    token_tenant: str = Field(
        "default", validation_alias="CAPSTAN_API_TOKEN_TENANT", pattern=TENANT_PATTERN
    )
    #: bodies above this many bytes are refused (413) before anything reaches Temporal
    max_body_bytes: int = Field(1_048_576, validation_alias="CAPSTAN_API_MAX_BODY", ge=1024)
    #: signal-writing requests per token and minute (each `capstan serve` process counts alone)
    writes_per_minute: int = Field(120, validation_alias="CAPSTAN_API_WRITES_PER_MINUTE", ge=1)
    #: how long a history long poll waits before the stream sends a keep-alive (seconds)
    stream_poll_seconds: float = Field(15.0, validation_alias="CAPSTAN_API_STREAM_POLL", gt=0)
    #: how often streamed model text is read while a model call is in flight (seconds)
    live_text_seconds: float = Field(0.5, validation_alias="CAPSTAN_API_LIVE_TEXT", gt=0)
    #: cookies marked Secure (set when the inbox is served over https)
    secure_cookies: bool = Field(False, validation_alias="CAPSTAN_API_SECURE_COOKIES")
