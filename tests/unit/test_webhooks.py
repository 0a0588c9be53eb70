"""Webhook configuration, signatures, bodies and which requests are new (no server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from capstan.activities.deliveries import MAX_RESPONSE_BYTES, post
from capstan.activities.webhook_bodies import inbox_link, json_body, slack_body
from capstan.core.notifications import inbox_path, newly_opened, request_anchor
from capstan.core.steering import ApprovalRequest, Question
from capstan.runtime.config import ConfigError
from capstan.runtime.embedded import EmbeddedServer
from capstan.runtime.webhooks import (
    Hook,
    SeenDeliveries,
    Verdict,
    load_webhooks,
    sign,
    verify_delivery,
    verify_signature,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def approval(
    request_id: str = "run-1/2/c1", arguments: str = '{"path": "a.txt"}'
) -> ApprovalRequest:
    return ApprovalRequest(
        request_id=request_id,
        call_id="c1",
        step=2,
        tool="write_file",
        arguments=arguments,
        args_hash="h",
        reason="policy asks for write_file",
        expires_at=WHEN,
    )


def question(request_id: str = "run-1/3/c2") -> Question:
    return Question(
        request_id=request_id, call_id="c2", step=3, question="Red <or> blue?", expires_at=WHEN
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hooks.toml"
    path.write_text(text)
    return path


def test_a_good_file_loads_and_checks_its_secrets_against_the_environment(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    path = write(
        tmp_path,
        '[hooks.a]\nurl = "https://a.example/x"\nsecret_env = "A_SECRET"\n'
        f'[hooks.b]\nurl_env = "B_URL"\nsecret_file = "{secret}"\nevents = ["question"]\n'
        '[hooks.c]\nurl = "http://c.example/"\nformat = "slack"\n',
    )
    config = load_webhooks(path, {"A_SECRET": "s", "B_URL": "https://b.example/y?token=t"})
    a, b, c = config.hooks
    assert a.secret_env == "A_SECRET" and b.events == ("question",) and c.format == "slack"
    assert b.resolve_secret({}) == b"from-a-file"
    assert b.where({"B_URL": "https://b.example/y?token=t"}) == "b (b.example)"  # no token
    with pytest.raises(ConfigError, match=r"^CAPSTAN_WEBHOOKS=.*A_SECRET is not set.*B_URL"):
        load_webhooks(path, {})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[hooks.a\n", "is not valid TOML"),
        ('[hooks.a]\nurl = "https://x"\n', "a json hook needs `secret_env` or `secret_file`"),
        ('[hooks.a]\nurl = "ftp://x"\nformat = "slack"\n', "must be http"),
        ('[hooks.a]\nformat = "slack"\n', "exactly one of `url` or `url_env`"),
        ('[hooks.a]\nurl = "https://x"\nformat = "xml"\n', "format"),
        ('[hook.a]\nurl = "https://x"\n', "unknown top-level keys"),
        ('[hooks.a]\nurl = "https://x"\nformat = "slack"\ncolour = 1\n', "colour"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_webhooks(write(tmp_path, text))
    message = str(caught.value)
    assert message.startswith("CAPSTAN_WEBHOOKS=") and "\n" not in message
    assert problem in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_webhooks(tmp_path / "nope.toml")


def test_signatures_bind_the_body_the_secret_and_the_time() -> None:
    body = b'{"event":"approval.opened"}'
    header = sign(b"k", 1_000, body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert verify_signature(b"k", body, header, "1000", now=1_010)
    assert not verify_signature(b"k", body + b" ", header, "1000", now=1_010)
    assert not verify_signature(b"other", body, header, "1000", now=1_010)
    assert not verify_signature(b"k", body, header, "1001", now=1_010)  # timestamp is signed
    assert not verify_signature(b"k", body, header, "1000", now=1_000 + 301)  # a replay
    assert not verify_signature(b"k", body, header, "soon", now=1_000)


def test_only_requests_not_announced_before_are_notified() -> None:
    first, second = approval("run-1/2/c1"), approval("run-1/2/c3")
    items = newly_opened("run-1", [first, second], [question()], {"run-1/2/c1"})
    assert [(i.kind, i.request_id) for i in items] == [
        ("approval", "run-1/2/c3"),
        ("question", "run-1/3/c2"),
    ]
    assert newly_opened("run-1", [first], [], {"run-1/2/c1"}) == []


def test_the_inbox_path_points_at_the_requests_card() -> None:
    path = inbox_path("run-1", "run-1/2/c1")
    assert path == f"/runs/run-1#{request_anchor('run-1', 'run-1/2/c1')}"
    # a delegated child's request is a card on its root run's page (under the root's pending)
    child = inbox_path("run-1/writer-1.0", "run-1/writer-1.0/2/c1")
    assert child == f"/runs/run-1#{request_anchor('run-1', 'run-1/writer-1.0/2/c1')}"


def test_bodies_carry_the_request_and_the_link() -> None:
    (item,) = newly_opened("run-1", [approval()], [], set())
    link = inbox_link("https://inbox.example/", item)
    assert link == "https://inbox.example" + item.inbox_path
    assert inbox_link(None, item) is None
    body = json_body(item, "x" * 20_000, link)
    assert body["event"] == "approval.opened" and body["delivery"] == "run-1/2/c1"
    assert len(body["request"]["arguments"]) == 16_000 and body["request"]["arguments_truncated"]
    slack = slack_body(item, '{"path": "<a>.txt"}', link)
    assert slack["text"] == (
        f"Capstan run `run-1` asks to approve `write_file`: <{link}|open in the inbox>"
    )
    texts = [b["text"]["text"] for b in slack["blocks"] if b["type"] == "section"]
    assert '```{"path": "&lt;a&gt;.txt"}```' in texts
    assert slack["blocks"][-1]["elements"][0]["url"] == link
    (asked,) = newly_opened("run-1", [], [question()], set())
    unlinked = slack_body(asked, None, None)
    assert unlinked["text"] == "Capstan run `run-1` asks: Red &lt;or&gt; blue?"
    assert all(b["type"] == "section" for b in unlinked["blocks"])  # no button without a link


def test_the_embedded_server_registers_the_tenant_attribute(tmp_path: Path) -> None:
    command = EmbeddedServer(tmp_path, 7233).command()
    at = command.index("--search-attribute")
    assert command[at + 1] == "CapstanTenant=Keyword"


def test_the_kinds_a_worker_notifies_are_what_its_hooks_want(tmp_path: Path) -> None:
    """What a listing puts in `ToolCatalog.notify`: runs start `notify_request` for these only."""
    assert load_webhooks(None).kinds() == ()
    hook = '[hooks.{}]\nurl = "https://{}.example/"\nformat = "slack"\nevents = {}\n'
    only_questions = write(tmp_path, hook.format("a", "a", '["question"]'))
    assert load_webhooks(only_questions).kinds() == ("question",)
    both = write(
        tmp_path,
        hook.format("a", "a", '["question"]') + hook.format("b", "b", '["approval"]'),
    )
    assert load_webhooks(both).kinds() == ("approval", "question")


def test_only_the_kinds_the_hooks_want_are_notified() -> None:
    both = newly_opened("run-1", [approval()], [question()], set(), ("question",))
    assert [item.kind for item in both] == ["question"]
    assert newly_opened("run-1", [approval()], [question()], set(), ()) == []


def test_a_replayed_delivery_is_refused_within_the_window_and_a_stale_one_after() -> None:
    """The README's promise: stale timestamps are refused, and so is a delivery seen before
    (the same request again, or Capstan's retry of it: same body, a new timestamp)."""
    body, sent = b'{"delivery":"run-r/2/c1","event":"approval.opened"}', 1_700_000_000
    header = sign(b"k", sent, body)
    assert verify_signature(b"k", body, header, str(sent), now=sent + 1)
    assert not verify_signature(b"k", body, header, str(sent), now=sent + 120)  # replayed
    assert verify_delivery(b"k", body, header, str(sent), now=sent + 2) is Verdict.REPLAYED
    retry = sign(b"k", sent + 60, body)
    assert verify_delivery(b"k", body, retry, str(sent + 60), now=sent + 61) is Verdict.REPLAYED
    assert verify_delivery(b"k", body, header, str(sent), now=sent + 301) is Verdict.STALE
    assert verify_delivery(b"x", body, header, str(sent), now=sent + 1) is Verdict.FORGED
    other = body.replace(b"c1", b"c2")
    signed = sign(b"k", sent, other)
    assert verify_delivery(b"k", other, signed, str(sent), now=sent) is Verdict.ACCEPTED


def test_the_store_of_seen_deliveries_is_bounded_and_forgets_after_the_window() -> None:
    seen = SeenDeliveries(capacity=2)
    bodies = [f'{{"delivery":"d{i}"}}'.encode() for i in range(3)]
    verdicts = [
        verify_delivery(b"k", b, sign(b"k", 1_000, b), "1000", now=1_000, seen=seen) for b in bodies
    ]
    assert verdicts == [Verdict.ACCEPTED, Verdict.ACCEPTED, Verdict.BUSY]  # full: refuses
    later = 1_000 + 301  # the first two are outside their window now: forgotten
    third = verify_delivery(
        b"k", bodies[2], sign(b"k", later, bodies[2]), str(later), now=later, seen=seen
    )
    assert third is Verdict.ACCEPTED and len(seen._expires) == 1


def test_a_hook_names_the_tokens_no_log_may_show() -> None:
    hook = Hook(name="h", url_env="H_URL", secret_env="H_SECRET")
    env = {
        "H_URL": "https://u:pw-123456789@h.example/p/tok%2D987654321?k=q-abcdefgh#f",
        "H_SECRET": "s3cret-xyz",
    }
    tokens = set(hook.tokens(env))
    assert {
        "s3cret-xyz",
        "pw-123456789",
        "tok%2D987654321",
        "tok-987654321",
        "q-abcdefgh",
    } <= tokens
    assert not any("h.example" in token for token in tokens)  # the host is named, not hidden


async def test_a_post_reads_a_few_kib_of_an_endless_answer() -> None:
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 1024

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=endless()))
    answer = await post(transport, httpx.Request("POST", "http://h.test/"), 5.0)
    assert answer.status == 200
    assert pulled <= MAX_RESPONSE_BYTES // 1024 + 1


async def test_a_post_has_one_deadline_however_the_answer_trickles() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.01)  # every read is quick: only the whole can time out
            yield b"x"

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=trickle()))
    with pytest.raises(TimeoutError):
        await post(transport, httpx.Request("POST", "http://h.test/"), 0.3)
