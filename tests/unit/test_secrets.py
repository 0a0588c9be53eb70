"""Scrubbing the worker's real API keys from everything a model activity sends out.

First the `Scrubber` on its own (every encoding a provider may echo a key in), then the one exit
it is applied at, `ModelActivities.ask`, against httpx.MockTransport: errors of both adapters,
and the heartbeat details a streamed reply rides on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from capstan.activities.model import ModelActivities, StreamProgress
from capstan.activities.providers.base import RenderedMessage
from capstan.activities.providers.profiles import ProfileTable
from capstan.activities.providers.secrets import REDACTED, Scrubber, worker_keys
from capstan.core.model_errors import ModelErrorKind
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.testing.wire import Turn, openai_chunks

KEY = "azure-7f3c9e2b41d8a6"
OTHER = "hosted/Qx+7Zp9w=k3y4m2"
SCRUB = Scrubber((KEY, OTHER))
HELLO = [RenderedMessage(role="user", content="hi")]


def escaped(text: str, upper: bool = False) -> str:
    return "".join((f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}") for c in text)


@pytest.mark.parametrize(
    "form",
    [
        KEY,
        OTHER,
        escaped(KEY),
        escaped(OTHER, upper=True),
        escaped(KEY).replace("\\", "\\\\"),  # a JSON message inside JSON
        json.dumps(OTHER)[1:-1],  # `\/` is legal JSON for `/`
        OTHER.replace("/", "\\/"),
        quote(OTHER, safe=""),
        quote(quote(OTHER, safe=""), safe=""),
        "azure-7f3c\\u0039\\u0065" + "2b41d8a6",  # partly escaped
        "".join(f"\\x{ord(c):02x}" for c in KEY),
    ],
)
def test_every_encoding_of_a_key_is_redacted(form: str) -> None:
    text = f'{{"error": "rejected credential {form} for deployment gpt-4o"}}'
    scrubbed = SCRUB.text(text)
    assert scrubbed == '{"error": "rejected credential [redacted] for deployment gpt-4o"}'


def test_a_key_cut_by_a_truncated_message_is_redacted() -> None:
    text = f"a stream chunk is not JSON: 'credential {KEY}'"[:52]
    assert KEY[:12] in text
    assert SCRUB.text(text) == f"a stream chunk is not JSON: 'credential {REDACTED}"


def test_text_without_keys_and_short_placeholders_are_left_alone() -> None:
    text = "HTTP 401: the key EMPTY is not valid for ollama; see https://example.test/%41"
    assert Scrubber(("EMPTY", "ollama", "")).text(text) == text
    assert SCRUB.text(text) == text


def test_values_are_scrubbed_at_every_depth() -> None:
    value = {"tail": f"my key is {KEY}", "more": [1, (f"{OTHER}!", None)], KEY: True}
    assert SCRUB.value(value) == {
        "tail": f"my key is {REDACTED}",
        "more": [1, (f"{REDACTED}!", None)],
        REDACTED: True,
    }


def test_errors_keep_their_type_and_retry_behaviour() -> None:
    original = ApplicationError(
        f"HTTP 429 for {KEY}",
        {"echo": OTHER},
        type=ModelErrorKind.RATE_LIMITED,
        non_retryable=False,
        next_retry_delay=timedelta(seconds=7),
    )
    error = SCRUB.error(original)
    assert error.message == f"HTTP 429 for {REDACTED}"
    assert error.details == ({"echo": REDACTED},)
    assert error.type == ModelErrorKind.RATE_LIMITED and not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=7)
    other = SCRUB.error(ValueError(f"bad value {escaped(KEY)}"))
    assert other.type == "ValueError" and other.message == f"bad value {REDACTED}"
    assert not other.non_retryable


def test_the_exit_chains_nothing_and_lets_cancellation_through() -> None:
    with pytest.raises(ApplicationError) as caught, SCRUB.exit():
        try:
            raise KeyError(KEY)
        except KeyError as exc:
            raise ApplicationError(f"wrapped {exc}") from exc
    assert KEY not in str(caught.value) and caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    with pytest.raises(CancelledError), SCRUB.exit():
        raise CancelledError("cancelled")


def test_worker_keys_are_every_key_variable_of_every_profile() -> None:
    env = {
        "OPENAI_API_KEY": "sk-default-0123456789",
        "ANTHROPIC_API_KEY": "",
        "AZURE_OPENAI_KEY": KEY,
        "BACKUP_KEY": OTHER,
        "UNRELATED": "not-a-key-at-all",
    }
    tables = [
        ProfileTable(provider="openai", model="m", api_key_env="AZURE_OPENAI_KEY"),
        ProfileTable(provider="anthropic", model="m", api_key_env="BACKUP_KEY"),
        ProfileTable(provider="openai", model="m", api_key_env="MISSING"),
    ]
    assert set(worker_keys(env, tables)) == {"sk-default-0123456789", KEY, OTHER}


def activities(tmp_path: Path, handler: httpx.MockTransport) -> ModelActivities:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        '[profiles.main]\nprovider = "openai"\nmodel = "m"\nbase_url = "http://p.test/v1"\n'
        'api_key_env = "AZURE_OPENAI_KEY"\n\n'
        '[profiles.claude]\nprovider = "anthropic"\nmodel = "m"\nbase_url = "http://p.test"\n'
        'api_key_env = "BACKUP_KEY"\n'
    )
    env = {"CAPSTAN_PROFILES": str(profiles), "AZURE_OPENAI_KEY": KEY, "BACKUP_KEY": OTHER}
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    return ModelActivities(content, env, httpx.AsyncClient(transport=handler))


def answer(response: httpx.Response) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: response)


@pytest.mark.parametrize(
    ("profile", "response", "kind"),
    [
        (
            "main",
            httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                text=f"data: proxy says: key {KEY} refused\n\n",
            ),
            ModelErrorKind.RESPONSE_INVALID,
        ),
        (
            "main",
            httpx.Response(400, text='{"error": {"message": "bad key ' + escaped(KEY) + '"}}'),
            ModelErrorKind.BAD_REQUEST,
        ),
        (
            "claude",
            httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                text="event: error\ndata: "
                + json.dumps({"type": "error", "error": {"type": "api_error", "echo": KEY}})
                + "\n\n",
            ),
            ModelErrorKind.SERVER_ERROR,
        ),
        (
            "claude",
            httpx.Response(503, text=f"upstream {quote(OTHER, safe='')} unavailable"),
            ModelErrorKind.SERVER_ERROR,
        ),
    ],
)
async def test_provider_errors_leave_ask_scrubbed(
    tmp_path: Path, profile: str, response: httpx.Response, kind: str
) -> None:
    models = activities(tmp_path, answer(response))
    with pytest.raises(ApplicationError) as caught:
        await models.ask(models.profile(profile), HELLO, [], step=0)
    error = caught.value
    assert error.type == kind and REDACTED in error.message, error.message
    assert SCRUB.text(error.message) == error.message  # nothing left to redact
    assert error.__cause__ is None


class _SlowStream(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(0.15)
            yield chunk


async def test_heartbeat_details_are_scrubbed(tmp_path: Path) -> None:
    """A reply that streams a key (here: the model repeats it) shows redacted in `watch`."""
    turn = Turn(step=0, model="m", content=f"The deployment key is {KEY}, as configured.")
    chunks = [f"data: {c}\n\n".encode() for c in openai_chunks(turn)]
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_SlowStream(chunks)
    )
    models = activities(tmp_path, answer(response))
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.extend(details)
    progress = StreamProgress("run-1", 0, 1)
    profile = models.profile("main")
    reply = await env.run(models.ask, profile, HELLO, [], 0, progress)
    assert KEY in reply.text  # the durable reply is the model's own text
    tails = [str(b["tail"]) for b in beats if isinstance(b, dict)]
    assert tails and any(REDACTED in t for t in tails)
    assert not any(KEY[:8] in t or KEY[-8:] in t for t in tails), tails
