"""No API key leaves the worker, whatever the provider echoes back.

Keys that do not look like `sk-…` (self-hosted and Azure keys) are echoed by a fake provider in a
stream chunk that is not JSON, in a 400 body with the key JSON-unicode-escaped, and in a stream
error event (another profile's key, raw and URL-encoded). Each run must end `model_error` with
the key redacted, and no form of any key may appear in the run's history (which `watch` and
the HTTP API read), its status (client and `status --json`), its audit trail, or the worker's
logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from capstan.audit.history import decode_history, load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import FakeProvider, Fault
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server

#: the run's profile reads this one (an Azure-style key: no `sk-` prefix)
KEY = "azure-7f3c9e2b41d8a6"
#: another profile's key, with characters that URL-encoding changes
OTHER = "hosted/Qx+7Zp9w=k3y4m2"


def unicode_escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def forms(key: str) -> set[str]:
    """How a key can show in text: raw, JSON-escaped (and that escaped again, as a message
    inside JSON), URL-encoded, and long pieces of it."""
    escaped = unicode_escaped(key)
    return {
        key,
        escaped,
        escaped.upper().replace("\\U", "\\u"),
        escaped.replace("\\", "\\\\"),
        quote(key, safe=""),
        key[:10],
        key[-10:],
    }


def leaked(text: str) -> list[str]:
    return sorted(f for key in (KEY, OTHER) for f in forms(key) if f in text)


def bad_chunk() -> Fault:
    garbage = f"upstream gateway: credential {KEY} was refused"
    return Fault(events=((None, garbage),), times=99)


def escaped_400() -> Fault:
    message = f"Incorrect API key provided: {unicode_escaped(KEY)}. Check your deployment."
    body = '{"error": {"message": "' + message + '", "code": "invalid_api_key"}}'
    return Fault(400, body=body, times=99)


def stream_error() -> Fault:
    error = {
        "message": "bad gateway",
        "upstream_auth": OTHER,
        "request": f"https://gw.example/v1?api-key={quote(OTHER, safe='')}",
        "echo": KEY,
    }
    return Fault(events=((None, json.dumps({"error": error})),), times=99)


CASES = {
    "bad_stream_chunk": (bad_chunk, "malformed"),
    "escaped_key_in_400": (escaped_400, "HTTP 400"),
    "stream_error_event": (stream_error, "mid-stream"),
}


def worker_env(profiles: Path) -> Callable[[FakeProvider], dict[str, str]]:
    def env(fake: FakeProvider) -> dict[str, str]:
        profiles.write_text(
            "[profiles.main]\n"
            'provider = "openai"\n'
            'model = "fake"\n'
            f'base_url = "{fake.base_url}"\n'
            'api_key_env = "AZURE_OPENAI_KEY"\n\n'
            "[profiles.backup]\n"
            'provider = "anthropic"\n'
            'model = "fake"\n'
            'api_key_env = "BACKUP_MODEL_KEY"\n'
        )
        return {
            "CAPSTAN_PROFILES": str(profiles),
            "AZURE_OPENAI_KEY": KEY,
            "BACKUP_MODEL_KEY": OTHER,
        }

    return env


@pytest.mark.parametrize("case", sorted(CASES))
async def test_no_key_leaves_the_worker(
    agent: Agent, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    fault, kind = CASES[case]
    run = await agent.run(
        [], faults={0: fault()}, env=worker_env(tmp_path / "profiles.toml"), model="main"
    )
    assert run.result.terminal_reason is TerminalReason.MODEL_ERROR
    error = run.result.error or ""
    assert kind in error and "[redacted]" in error, error  # the echo reached the error

    history = (await run.handle.fetch_history()).to_json()
    histories = await load_histories(agent.temporal, run.run_id)
    records, _ = build_trail([decode_history(h) for h in histories], run.client.content())
    audit = render_trail(records, [], "jsonl")
    status = await asyncio.to_thread(run_cli, agent.settings, "status", run.run_id, "--json")
    watch = await asyncio.to_thread(
        run_cli, agent.settings, "watch", run.run_id, "--from", "0", "--json"
    )
    assert status.returncode == 0, status.stderr
    assert '"run_ended"' in watch.stdout, watch.stderr  # exit 1: the run did not complete
    logs = caplog.text + "\n".join(
        f"{r.getMessage()} {r.exc_text or ''} {r.__dict__}" for r in caplog.records
    )
    assert "Completing activity as failed" in logs  # the worker logged the failures
    places = {
        "history": history,
        "status": run.status.model_dump_json() + run.result.model_dump_json(),
        "status --json": status.stdout,
        "watch --json": watch.stdout,
        "audit jsonl": audit,
        "worker log": logs,
    }
    assert {place: leaked(text) for place, text in places.items()} == {p: [] for p in places}
