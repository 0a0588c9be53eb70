"""`capstan.host.sdk_shortcuts`: the SDK's payload walks are skipped for Capstan's keyless
converter only; with keys (the codec must run) and for any other converter they still happen."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import temporalio.bridge.worker as bridge
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.contrib.pydantic import pydantic_data_converter

from capstan.host.sdk_shortcuts import install, skips
from capstan.runtime.codec import ENCODING, PayloadCipher, data_converter, load_keyring

KEYS = f"k1:{base64.b64encode(bytes(range(32))).decode()}"


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every walk the SDK's payload visitor starts."""
    seen: list[Any] = []
    original = bridge.CommandAwarePayloadVisitor.visit

    async def visit(self: Any, functions: Any, message: Any) -> None:
        seen.append(message)
        await original(self, functions, message)

    monkeypatch.setattr(bridge.CommandAwarePayloadVisitor, "visit", visit)
    return seen


def activation_with(payload: Any) -> WorkflowActivation:
    activation = WorkflowActivation(run_id="r")
    job = activation.jobs.add()
    job.signal_workflow.signal_name = "s"
    job.signal_workflow.input.append(payload)
    return activation


async def test_keyless_capstan_runs_skip_the_walks(walks: list[Any]) -> None:
    assert install() and install()  # idempotent
    keyless = data_converter(None)
    assert skips(keyless)
    (payload,) = await keyless.encode(["hello"])
    await bridge.decode_activation(
        activation_with(payload), keyless, decode_headers=True, storage_concurrency_limit=1
    )
    completion = WorkflowActivationCompletion(run_id="r")
    completion.successful.commands.add().complete_workflow_execution.result.CopyFrom(payload)
    await bridge.encode_completion(
        completion, keyless, encode_headers=True, storage_concurrency_limit=1
    )
    assert walks == []


async def test_with_keys_the_codec_still_runs(walks: list[Any]) -> None:
    install()
    keyed = data_converter(load_keyring(KEYS, None))
    assert not skips(keyed)
    (sealed,) = await PayloadCipher(load_keyring(KEYS, None)).encode(
        await data_converter(None).encode(["secret"])
    )
    assert sealed.metadata["encoding"] == ENCODING
    activation = activation_with(sealed)
    await bridge.decode_activation(
        activation, keyed, decode_headers=True, storage_concurrency_limit=1
    )
    assert len(walks) == 3  # references, external storage, codec
    decoded = activation.jobs[0].signal_workflow.input[0]
    assert await keyed.decode([decoded], [str]) == ["secret"]


async def test_other_converters_keep_the_sdks_path(walks: list[Any]) -> None:
    install()
    assert not skips(pydantic_data_converter)
    (payload,) = await pydantic_data_converter.encode(["plain"])
    await bridge.decode_activation(
        activation_with(payload),
        pydantic_data_converter,
        decode_headers=True,
        storage_concurrency_limit=1,
    )
    assert len(walks) == 3
