"""The codec: keys from the environment or a file, AES-256-GCM payloads and blobs with the key id
beside the ciphertext, rotation, and every way a key can be wrong as one clear line."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from capstan.runtime.blobstore import BlobIntegrityError, BlobKeyError, LocalBlobStore
from capstan.runtime.codec import (
    ENCODING,
    KEY_ID_METADATA,
    CodecError,
    Keyring,
    PayloadCipher,
    data_converter,
    decrypt_history,
    load_keyring,
)
from capstan.runtime.config import ConfigError

K1 = base64.b64encode(b"1" * 32).decode()
K2 = base64.b64encode(b"2" * 32).decode()


def ring(text: str) -> Keyring:
    keyring = load_keyring(text, None)
    assert keyring is not None
    return keyring


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("k1", "each key is `id:base64`"),
        ("k 1:" + K1, "each key is `id:base64`"),
        ("k1:c2hvcnQ=", "key 'k1' is not 32 bytes of base64 (AES-256)"),
        ("k1:not base64!", "key 'k1' is not 32 bytes of base64"),
        (f"k1:{K1},k1:{K2}", "key id 'k1' is listed twice"),
        (" , ", "no keys given"),
    ],
)
def test_a_bad_key_is_one_line_without_key_material(keys: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_keyring(keys, None)
    message = str(exc.value)
    assert expected in message and "\n" not in message
    assert K1 not in message and K2 not in message


def test_keys_from_a_file_and_the_first_one_encrypts(tmp_path: Path) -> None:
    assert load_keyring(None, None) is None
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2025-01\nk2:{K2}\nk1:{K1}  # old\n")
    keyring = load_keyring(None, path)
    assert keyring is not None and keyring.current == "k2" and keyring.ids == ["k2", "k1"]
    with pytest.raises(ConfigError, match=r"CAPSTAN_CODEC_KEY_FILE=.*cannot be read"):
        load_keyring(None, tmp_path / "absent")


async def test_payloads_round_trip_and_name_their_key() -> None:
    cipher = PayloadCipher(ring(f"k1:{K1}"))
    (sealed,) = await cipher.encode([plain("secret task")])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert b"secret task" not in sealed.SerializeToString()
    (opened,) = await cipher.decode([sealed])
    assert opened == plain("secret task")


async def test_rotation_plaintext_passthrough_and_wrong_keys() -> None:
    (old,) = await PayloadCipher(ring(f"k1:{K1}")).encode([plain("old run")])
    rotated = PayloadCipher(ring(f"k2:{K2},k1:{K1}"))
    (new,) = await rotated.encode([plain("new run")])
    assert new.metadata[KEY_ID_METADATA] == b"k2"
    assert await rotated.decode([old, new, plain("never encrypted")]) == [
        plain("old run"),
        plain("new run"),
        plain("never encrypted"),
    ]
    with pytest.raises(CodecError, match=r"key id 'k1', which CAPSTAN_CODEC_KEYS does not list"):
        await PayloadCipher(ring(f"k2:{K2}")).decode([old])
    with pytest.raises(CodecError, match="does not decrypt with key id 'k1'"):
        await PayloadCipher(ring(f"k1:{K2}")).decode([old])
    with pytest.raises(CodecError, match="no key is configured"):
        await PayloadCipher(None).decode([old])
    assert await PayloadCipher(None).encode([plain("x")]) == [plain("x")]


def test_sealed_blobs_verify_and_old_plaintext_blobs_still_read(tmp_path: Path) -> None:
    plain_store = LocalBlobStore(tmp_path)
    legacy = plain_store.put(b"written before encryption")
    sealed_store = LocalBlobStore(tmp_path, ring(f"k1:{K1}"))
    digest = sealed_store.put(b"tool output")
    path = tmp_path / digest[:2] / digest[2:]
    assert b"tool output" not in path.read_bytes()
    assert digest == hashlib.sha256(b"tool output").hexdigest()
    assert sealed_store.get(digest) == b"tool output"
    assert sealed_store.get(legacy) == b"written before encryption"
    with pytest.raises(BlobKeyError, match="no key is configured"):
        plain_store.get(digest)
    with pytest.raises(BlobKeyError, match="does not decrypt"):
        LocalBlobStore(tmp_path, ring(f"k1:{K2}")).get(digest)
    stored = path.read_bytes()
    path.write_bytes(stored[:-1] + bytes([stored[-1] ^ 1]))  # one flipped bit
    with pytest.raises(BlobKeyError, match="or the ciphertext was altered"):
        sealed_store.get(digest)
    (tmp_path / legacy[:2] / legacy[2:]).write_bytes(b"tampered")
    with pytest.raises(BlobIntegrityError):
        sealed_store.get(legacy)


async def test_a_history_is_decrypted_in_place_failures_included() -> None:
    converter = data_converter(ring(f"k1:{K1}"))
    codec = converter.payload_codec
    assert codec is not None
    (task,) = await codec.encode([plain("secret task")])
    failure = Failure()
    await converter.encode_failure(RuntimeError("tool said: secret"), failure)
    assert failure.message == "Encoded failure"
    started = HistoryEvent(event_id=1)
    started.workflow_execution_started_event_attributes.input.payloads.append(task)
    started.workflow_execution_started_event_attributes.memo.fields["m"].CopyFrom(task)
    failed = HistoryEvent(event_id=2)
    failed.activity_task_failed_event_attributes.failure.CopyFrom(failure)
    history = await decrypt_history(WorkflowHistory("wf", [started, failed]), converter)
    attrs = history.events[0].workflow_execution_started_event_attributes
    assert attrs.input.payloads[0] == plain("secret task")
    assert attrs.memo.fields["m"] == plain("secret task")
    restored = history.events[1].activity_task_failed_event_attributes.failure
    assert restored.message == "tool said: secret"
    assert not restored.HasField("encoded_attributes")


async def test_without_keys_there_is_no_codec_and_an_encrypted_payload_is_refused() -> None:
    """No codec without keys (a codec that changes nothing still costs the SDK a pass over every
    payload); the payload converter refuses the encrypted encoding in the codec's own words."""
    keyless = data_converter(None)
    assert keyless.payload_codec is None
    (sealed,) = await PayloadCipher(ring(f"k1:{K1}")).encode([plain("secret")])
    with pytest.raises(CodecError) as refused:
        keyless.payload_converter.from_payloads([sealed], [str])
    assert str(refused.value) == (
        "a payload is encrypted (key id 'k1') and no key is configured: set "
        "CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE"
    )
    (plain_payload,) = await keyless.encode(["still JSON"])
    assert plain_payload.metadata["encoding"] == b"json/plain"
    assert await keyless.decode([plain_payload], [str]) == ["still JSON"]
