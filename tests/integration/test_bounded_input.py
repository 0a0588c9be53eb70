"""Untrusted regexes and schemas through the durable loop (issue 26): an MCP server's tool
schemas never make the worker fetch, backtrack or fail the run, and a worker's deny pattern
still denies when the run's spec sets another one for the same field."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from capstan.audit.history import decode_history, load_histories
from capstan.core.spec import TerminalReason, ToolRule
from capstan.core.tooling import ToolCatalog
from capstan.testing.fake_provider import call, say
from tests.integration.mcp_fixtures import write_config
from tests.integration.scripted_agent import Agent, Run

pytestmark = pytest.mark.server

SCHEMA_SERVER = Path(__file__).with_name("mcp_schema_servers.py")
PATHOLOGICAL = "a" * 40 + "!"  # ~2^40 steps for a backtracking `^(a|a)+$`: hours


@dataclass
class Counting:
    """A loopback HTTP server that counts the requests it gets (a schema a `$ref` points at)."""

    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def ref_server() -> Iterator[Counting]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Counting(f"http://127.0.0.1:{server.server_port}/schema.json", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def schema_server(ref_url: str) -> str:
    return f"""
[servers.schemas]
command = "{sys.executable}"
args = ["{SCHEMA_SERVER}", "{ref_url}"]
timeout_seconds = 10
"""


def observations(run: Run, name: str) -> list[str]:
    return [c.observation or "" for s in run.steps for c in s.tool_calls if c.name == name]


async def catalog_of(agent: Agent, run_id: str) -> ToolCatalog:
    runs = [decode_history(h) for h in await load_histories(agent.temporal, run_id)]
    return next(e.result for r in runs for e in r if isinstance(e.result, ToolCatalog))


async def test_hostile_mcp_schemas_become_observations(
    agent: Agent, tmp_path: Path, ref_server: Counting
) -> None:
    """A remote `$ref` is never fetched (today: fetched from workflow code), an invalid regex
    refuses the call (today: the run failed), a non-RE2 regex is refused, and `^(a|a)+$` runs
    in linear time (today: the gate backtracks for hours)."""
    agent.configure(mcp_file=write_config(tmp_path, schema_server(ref_server.url)))
    script = [
        say(
            call("schemas__remote", text="hi"),
            call("schemas__badregex", text="x"),
            call("schemas__lookahead", text="x"),
            call("schemas__redos", text=PATHOLOGICAL),
            call("schemas__redos", text="aaaa"),
        ),
        say(call("finish", answer="done")),
    ]
    run = await agent.run(script, max_steps=4, timeout=120)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    assert ref_server.requests == []
    (remote,) = observations(run, "schemas__remote")
    assert "outside itself" in remote and ref_server.url in remote
    (bad,) = observations(run, "schemas__badregex")
    assert "cannot be called" in bad and "'([a-z'" in bad
    (lookahead,) = observations(run, "schemas__lookahead")
    assert "RE2" in lookahead
    refused, ran = observations(run, "schemas__redos")
    assert "does not match '^(a|a)+$'" in refused
    assert ran == "called redos"
    # the listing said which tools' schemas cannot be used, once each
    diagnostics = (await catalog_of(agent, run.run_id)).diagnostics
    noted = sorted(d.split(",")[1].split(":")[0].strip() for d in diagnostics if "schema" in d)
    assert noted == ["tool badregex", "tool lookahead"]


async def test_a_hostile_output_schema_cannot_stall_the_worker(
    agent: Agent, tmp_path: Path, ref_server: Counting
) -> None:
    """The SDK checks structured content against the tool's output schema with Python's `re`
    on the worker's event loop (today: stalled for hours); Capstan checks it with RE2, and
    content that does not match is an observation."""
    agent.configure(mcp_file=write_config(tmp_path, schema_server(ref_server.url)))
    script = [say(call("schemas__redos_out", text="x")), say(call("finish", answer="done"))]
    run = await agent.run(script, max_steps=3, timeout=120)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    (seen,) = observations(run, "schemas__redos_out")
    assert "output schema" in seen and "does not match '^(a|a)+$'" in seen


async def test_a_run_adds_deny_patterns_and_never_replaces_the_workers(
    agent: Agent, tmp_path: Path
) -> None:
    """The worker denies `secrets/` writes; a run that sets its own pattern for `path` adds to
    that (today it replaced it, and the write ran)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[tools.write_file]\ndecision = "allow"\ndeny_arguments = { path = "^secrets/" }\n'
    )
    agent.configure(policy_file=policy)
    script = [
        say(call("write_file", path="secrets/key.txt", content="k")),
        say(call("write_file", path="tmp/x.txt", content="x")),
        say(call("finish", answer="done")),
    ]
    rule = ToolRule(deny_arguments={"path": "^tmp/"})
    run = await agent.run(script, max_steps=5, tool_policy={"write_file": rule}, timeout=120)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    secret, tmp = observations(run, "write_file")
    assert "policy denies write_file with path matching '^secrets/'" in secret
    assert "policy denies write_file with path matching '^tmp/'" in tmp
    assert not list(agent.settings.data_dir.rglob("key.txt"))
