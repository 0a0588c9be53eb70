"""The one place Capstan connects to Temporal: clients, the CLI and workers all dial through
`connect_temporal`, so they agree on the converter (and its keys), TLS and credentials.

Never: hold run logic or import a client or worker layer (both import this)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.service import RPCError

from capstan.runtime.blobs import keyring_for
from capstan.runtime.codec import data_converter
from capstan.runtime.config import Settings
from capstan.runtime.temporal_connection import explain_connect_failure

__all__ = ["connect_temporal"]


async def connect_temporal(settings: Settings) -> Client:
    """The one place Capstan connects to Temporal (client, CLI and worker): the address,
    namespace, API key, TLS and gRPC metadata that `temporalio.envconfig` resolved into
    `settings`, with Capstan's data converter (pydantic v2 payloads, encrypted with the codec
    keys of `settings` when it has any: `capstan.runtime.codec`).

    Raises `ConfigError` (an unreadable or non-PEM certificate or key) or
    `TemporalConnectError` (nothing answers, TLS or credentials refused), each one line."""
    access = settings.temporal
    tls = access.tls_option()  # reads certificate files now, so rotated files are picked up
    converter = data_converter(keyring_for(settings))  # a bad key is a ConfigError, here
    try:
        return await Client.connect(
            settings.address,
            namespace=settings.namespace,
            api_key=access.api_key.get_secret_value() if access.api_key else None,
            tls=tls,
            rpc_metadata=access.grpc_meta,
            data_converter=converter,
        )
    except (RuntimeError, ValueError, RPCError) as exc:
        raise explain_connect_failure(settings.address, access, exc) from exc
