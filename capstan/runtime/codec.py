"""Encryption at rest: AES-256-GCM for every Temporal payload and every blob.

With keys configured, the Temporal database and the blob store hold ciphertext only: tasks,
messages, tool arguments and results are readable by a process that holds a key (a worker, a
client, the codec server) and by nothing else. Keys come from the environment of that process:

    CAPSTAN_CODEC_KEYS="k2:<base64 of 32 bytes>,k1:<base64 of 32 bytes>"   # or
    CAPSTAN_CODEC_KEY_FILE=/run/secrets/capstan-keys   # the same entries, one per line, # comments

The first key encrypts; every listed key decrypts. Each ciphertext names its key id (payload
metadata `encryption-key-id`, a blob's envelope header), so keys rotate by putting a new key
first and keeping the old ones listed until nothing encrypted with them is read any more.

Without keys no codec is installed — Temporal's SDK then leaves every payload as it is, and a
codec, even one that changes nothing, costs a pass over every payload of every activation and
activity — and the payload converter knows the encrypted encoding only to refuse it: an
encrypted payload is one clear line (`CodecError`), never an "unknown encoding" deep in
Temporal. A wrong key is always an error (GCM authenticates), never garbage.

Edge module: reads key material only from what it is given; never logs or prints a key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    PayloadCodec,
)

from capstan.runtime.environment import ConfigError
from capstan.runtime.payloads import SharedAdaptersPayloadConverter, shared_encoding_converters

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ENCODING",
    "KEY_ID_METADATA",
    "CodecError",
    "KeylessPayloadConverter",
    "Keyring",
    "PayloadCipher",
    "data_converter",
    "decrypt_events",
    "decrypt_history",
    "load_keyring",
]

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
CIPHER_METADATA = "encryption-cipher"
_CIPHER = b"AES-256-GCM"
_NONCE = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: a sealed blob starts with this, then one byte (key id length), the key id, nonce, ciphertext
BLOB_MAGIC = b"\x00capstan-aead1\x00"
_PAYLOAD_AAD = b"capstan-payload"
_GENERATE = "make one with `openssl rand -base64 32`"


class CodecError(ConfigError):
    """A payload or blob that cannot be decrypted (no key, unknown key id, wrong key): this
    process's keys are wrong, so it is a `ConfigError`; one line, never key material."""


class Keyring:
    """Named AES-256 keys; the first one encrypts, all of them decrypt."""

    def __init__(self, keys: Sequence[tuple[str, bytes]], origin: str = "CAPSTAN_CODEC_KEYS"):
        if not keys:
            raise ConfigError(f"{origin}: no keys given")
        # imported here: a process without keys (most workers) never loads the library (~7 MB)
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.origin = origin
        self._keys: dict[str, AESGCM] = {}
        for key_id, key in keys:
            if key_id in self._keys:
                raise ConfigError(f"{origin}: key id {key_id!r} is listed twice")
            self._keys[key_id] = AESGCM(key)
        self.current = keys[0][0]

    @property
    def ids(self) -> list[str]:
        return list(self._keys)

    def encrypt(self, data: bytes, aad: bytes) -> tuple[str, bytes]:
        """`(key id, nonce + ciphertext)` under the current key."""
        nonce = os.urandom(_NONCE)
        return self.current, nonce + self._keys[self.current].encrypt(nonce, data, aad)

    def decrypt(self, key_id: str, sealed: bytes, aad: bytes, what: str) -> bytes:
        """The plaintext of `sealed`; `CodecError` naming `what` when it cannot be had."""
        aead = self._keys.get(key_id)
        if aead is None:
            raise CodecError(
                f"{what} is encrypted with key id {key_id!r}, which {self.origin} does not "
                f"list (it has: {', '.join(self.ids)})"
            )
        from cryptography.exceptions import InvalidTag

        try:
            return aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], aad)
        except InvalidTag:
            raise CodecError(
                f"{what} does not decrypt with key id {key_id!r}: the key under that id is not "
                "the one it was encrypted with (or the ciphertext was altered)"
            ) from None

    # --- blobs: a self-describing envelope, bound to the blob's name -------------------------

    def seal_blob(self, data: bytes, name: str) -> bytes:
        key_id, sealed = self.encrypt(data, _blob_aad(name))
        raw_id = key_id.encode()
        return BLOB_MAGIC + bytes([len(raw_id)]) + raw_id + sealed

    def open_blob(self, stored: bytes, name: str) -> bytes:
        key_id, sealed = blob_key_id(stored)
        return self.decrypt(key_id, sealed, _blob_aad(name), f"blob {name}")


def is_sealed_blob(stored: bytes) -> bool:
    return stored.startswith(BLOB_MAGIC)


def blob_key_id(stored: bytes) -> tuple[str, bytes]:
    """The key id of a sealed blob and the rest of it (nonce + ciphertext)."""
    start = len(BLOB_MAGIC) + 1
    end = start + stored[len(BLOB_MAGIC)]
    return stored[start:end].decode("ascii", errors="replace"), stored[end:]


def _blob_aad(name: str) -> bytes:
    return b"capstan-blob:" + name.encode("ascii")


def _parse_keys(text: str, origin: str) -> list[tuple[str, bytes]]:
    """`id:base64` entries separated by commas or lines; `#` starts a comment."""
    keys = []
    for raw in re.split(r"[,\n]", text):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not _KEY_ID.fullmatch(key_id):
            raise ConfigError(
                f"{origin}: each key is `id:base64` with an id of letters, digits, '.', '_' "
                f"or '-' (got an entry starting {entry[:12]!r}...)"
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise ConfigError(
                f"{origin}: key {key_id!r} is not 32 bytes of base64 (AES-256); {_GENERATE}"
            )
        keys.append((key_id, key))
    return keys


def load_keyring(keys: str | None, key_file: Path | None) -> Keyring | None:
    """The keys of `CAPSTAN_CODEC_KEYS` then those of `CAPSTAN_CODEC_KEY_FILE`; None if neither
    is set. A bad entry or an unreadable file is a one-line `ConfigError`."""
    entries: list[tuple[str, bytes]] = []
    origins = []
    if keys:
        entries += _parse_keys(keys, "CAPSTAN_CODEC_KEYS")
        origins.append("CAPSTAN_CODEC_KEYS")
    if key_file is not None:
        origin = f"CAPSTAN_CODEC_KEY_FILE={key_file}"
        try:
            text = key_file.read_text()
        except OSError as exc:
            raise ConfigError(f"{origin}: the key file cannot be read: {exc.strerror}") from None
        entries += _parse_keys(text, origin)
        origins.append("CAPSTAN_CODEC_KEY_FILE")
    if not origins:
        return None
    return Keyring(entries, " / ".join(origins))


class PayloadCipher(PayloadCodec):
    """Temporal's payload codec: each payload becomes `binary/encrypted` with its key id.

    Decoding leaves payloads that were never encrypted as they are (runs started before
    encryption was turned on keep working); with no keyring, encoding is the identity.
    """

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if self.keyring is None:
            return list(payloads)
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        assert self.keyring is not None
        key_id, sealed = self.keyring.encrypt(payload.SerializeToString(), _PAYLOAD_AAD)
        return Payload(
            metadata={
                "encoding": ENCODING,
                KEY_ID_METADATA: key_id.encode(),
                CIPHER_METADATA: _CIPHER,
            },
            data=sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = _key_id_of(payload)
        if self.keyring is None:
            raise _no_key(key_id)
        plain = self.keyring.decrypt(key_id, payload.data, _PAYLOAD_AAD, "a payload")
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


def _key_id_of(payload: Payload) -> str:
    return payload.metadata.get(KEY_ID_METADATA, b"").decode("ascii", errors="replace")


def _no_key(key_id: str) -> CodecError:
    return CodecError(
        f"a payload is encrypted (key id {key_id!r}) and no key is configured: set "
        "CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE"
    )


class _RefuseEncrypted(EncodingPayloadConverter):
    """The encrypted encoding, known to a process without keys only to refuse it clearly."""

    @property
    def encoding(self) -> str:
        return ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None  # never chosen to encode

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise _no_key(_key_id_of(payload))


_REFUSE_ENCRYPTED = _RefuseEncrypted()  # stateless


class KeylessPayloadConverter(CompositePayloadConverter):
    """Capstan's payload converter for a process without keys: as
    `SharedAdaptersPayloadConverter`, and an encrypted payload is a `CodecError`."""

    def __init__(self) -> None:
        super().__init__(*shared_encoding_converters(), _REFUSE_ENCRYPTED)


def data_converter(keyring: Keyring | None) -> DataConverter:
    """Capstan's converter: pydantic v2 payloads (type adapters shared by the process, see
    `capstan.runtime.payloads`), through `PayloadCipher` when there are keys. With keys, failure
    messages and stack traces are moved into an encrypted payload too (they can quote tool
    output); Temporal decodes them back for every holder of the key. Without keys there is no
    codec at all (see the module's docstring)."""
    if keyring is None:
        return dataclasses.replace(
            pydantic_data_converter, payload_converter_class=KeylessPayloadConverter
        )
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=SharedAdaptersPayloadConverter,
        payload_codec=PayloadCipher(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


# --- histories: what `fetch_history` returns is still encoded ---------------------------------


async def decrypt_history(history: WorkflowHistory, converter: DataConverter) -> WorkflowHistory:
    """`history` with every payload decoded by `converter`'s codec, in place (audits and the
    event stream read raw histories, which Temporal hands out exactly as stored)."""
    await decrypt_events(history.events, converter)
    return history


async def decrypt_events(events: Iterable[HistoryEvent], converter: DataConverter) -> None:
    """Decode, in place, every encrypted payload of `events` (inputs, results, memos, signal
    and update arguments, heartbeat details) and restore encrypted failure messages.

    Without a codec an encrypted payload is a `CodecError` naming its key id and the settings
    that give keys: left in place, it would reach every reader of the history as an
    "undecodable" value (the audit then failed on an attribute deep inside)."""
    payloads: list[Payload] = []
    failures: list[Failure] = []
    for event in events:
        _collect(event, payloads, failures)
    sealed = [p for p in payloads if p.metadata.get("encoding") == ENCODING]
    if converter.payload_codec is None:
        if sealed:
            raise _no_key(_key_id_of(sealed[0]))
        return
    if sealed:
        for target, plain in zip(sealed, await converter.payload_codec.decode(sealed), strict=True):
            target.CopyFrom(plain)
    for failure in failures:
        _restore_failure(failure, converter)


def _collect(message: Message, payloads: list[Payload], failures: list[Failure]) -> None:
    if isinstance(message, Failure) and message.HasField("encoded_attributes"):
        failures.append(message)
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        items: Iterable[Any]
        if isinstance(value, Message):
            items = (value,)
        elif callable(getattr(value, "values", None)):
            items = value.values()  # a map field
        else:
            items = value  # a repeated field
        for item in items:
            if isinstance(item, Payload):
                payloads.append(item)
            elif isinstance(item, Message):
                _collect(item, payloads, failures)


def _restore_failure(failure: Failure, converter: DataConverter) -> None:
    """Put an encrypted failure's message and stack trace back where readers look for them."""
    try:
        attrs = converter.payload_converter.from_payload(failure.encoded_attributes, dict)
    except Exception:
        return  # still encrypted (no key): the message stays "Encoded failure"
    if isinstance(attrs, dict):
        failure.message = str(attrs.get("message", failure.message))
        failure.stack_trace = str(attrs.get("stack_trace", failure.stack_trace))
        failure.ClearField("encoded_attributes")
