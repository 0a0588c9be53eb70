"""Clients generated from the OpenAPI document, as an outside project generates them.

The document is read from a real `capstan serve` (a subprocess on the session's dev server).
`openapi-typescript` (npm, default flags) writes types that a strict `tsc` must accept for what
a TypeScript caller writes (a run started with only `task`, every answer field present), and a
program on those types and `openapi-fetch` drives a run under node;
`openapi-python-client` (PyPI, the dev extra) writes a package that starts a run, sees its
approval request, approves it and reads the result, against an in-process worker whose model is
the fake provider.

The npm tools are installed, pinned, into `.capstan/npm-tools` the first time (npm registry).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.integration import outside
from tests.integration.scripted_agent import Agent

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: the generators and the compiler, pinned; bump them here on purpose
NPM_TOOLS = {"openapi-fetch": "0.17.0", "openapi-typescript": "7.13.0", "typescript": "5.9.3"}
TOKEN = "generated-client-token-0123456789"
BIN = Path(sys.executable).parent

USAGE_TS = """\
// What a TypeScript caller of the API writes, compiled against the generated types.
import type { components, operations } from "./api";

type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
type Body<K extends keyof operations> = Json<NonNullable<operations[K]["requestBody"]>>;
type Answer<K extends keyof operations, S extends keyof operations[K]["responses"]> = Json<
  operations[K]["responses"][S]
>;

// a request names only what it wants: every field with a server default is optional
export const start: Body<"startRun"> = { task: "write a.txt" };
export const tuned: Body<"startRun"> = { task: "write a.txt", max_steps: 3, agent: "reviewer" };
// @ts-expect-error unknown fields are refused, misspelt ones too
export const misspelt: Body<"startRun"> = { task: "x", max_step: 3 };
// @ts-expect-error the fields Capstan sets itself are not part of the request
export const internal: Body<"startRun"> = { task: "x", depth: 2 };
export const approval: Body<"approve"> = {};
export const denial: Body<"deny"> = { reason: "not that file" };
export const pause: Body<"pause"> = {};
export const budget: Body<"grantBudget"> = { budget: "input_tokens", amount: 1000 };

// an answer always carries every field (null where there is nothing)
export const runId = (started: Answer<"startRun", 201>): string => started.run_id;
// `output` is data: a typed result's JSON value (`output_format` "json"), else the answer's text
export const text = (status: Answer<"getRun", 200>): string | undefined =>
  status.output_format === "text" && typeof status.output === "string" ? status.output : undefined;
export const format = (status: Answer<"getRun", 200>): "text" | "json" => status.output_format;
export const reason = (
  status: Answer<"getRun", 200>,
): components["schemas"]["TerminalReason"] | null => status.terminal_reason;
export const firstHash = (pending: Answer<"getPending", 200>): string | undefined =>
  pending.approvals[0]?.args_hash;
export const applied = (result: Answer<"approve", 200>): boolean | null => result.applied;
export const listed = (runs: Answer<"listRuns", 200>): string[] => runs.map((r) => r.status);
"""

TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "noUncheckedIndexedAccess": True,
        "target": "es2022",
        "module": "esnext",
        "moduleResolution": "bundler",
    },
    "files": ["usage.ts"],
}


def npm_bin(name: str) -> Path:
    """A pinned npm tool of this file's kit."""
    return outside.npm_bin("npm-tools", NPM_TOOLS, name)


def run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert done.returncode == 0, f"{args[0]}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def capstan_serve(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`capstan serve` on the test's server, queue and data dir; its base URL. The document
    it serves is written to `openapi.json` in the test's directory."""
    env = {"CAPSTAN_API_TOKEN": TOKEN}
    with outside.serve_process(settings, tmp_path / "serve.log", env) as base:
        document = httpx.get(f"{base}/openapi.json", timeout=10).raise_for_status()
        (tmp_path / "openapi.json").write_text(document.text)  # the document, as served
        yield base


def generate_python(document: Path, into: Path) -> ModuleType:
    """The package openapi-python-client writes, imported (as `capstan_api_client`)."""
    package = into / "capstan_api_client"
    run(
        BIN / "openapi-python-client",
        "generate",
        "--path",
        document,
        "--output-path",
        package,
        "--meta",
        "none",
        cwd=into,
    )
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module("capstan_api_client")
    finally:
        sys.path.remove(str(into))


def test_typescript_client_compiles(capstan_serve: str, tmp_path: Path) -> None:
    """openapi-typescript with default flags, then strict tsc on what a caller writes: fails
    when a defaulted request field is required, an answer field optional, an id missing."""
    generator, tsc = npm_bin("openapi-typescript"), npm_bin("tsc")
    document = tmp_path / "openapi.json"
    run(generator, document, "-o", tmp_path / "api.d.ts", cwd=tmp_path)
    (tmp_path / "usage.ts").write_text(USAGE_TS)
    (tmp_path / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    run(tsc, "-p", tmp_path / "tsconfig.json", cwd=tmp_path)


DRIVE_TS = """\
// A TypeScript program on the generated types: start a run, approve its request, read its end.
import createClient from "openapi-fetch";
import type { paths } from "./api.js";

declare const process: { argv: string[] };
const [base, token] = process.argv.slice(2);
const api = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${token}` } });
const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

const started = await api.POST("/api/runs", { body: { task: "write a.txt", max_steps: 5 } });
if (!started.data) throw new Error(JSON.stringify(started.error));
const run_id = started.data.run_id;
const path = { params: { path: { run_id } } };
let request = undefined;
for (let i = 0; i < 600 && !request; i++) {
  request = (await api.GET("/api/runs/{run_id}/pending", path)).data?.approvals[0];
  await sleep(100);
}
if (!request) throw new Error("no approval request");
const decided = await api.POST("/api/runs/{run_id}/approve", {
  ...path,
  body: { request_id: request.request_id, args_hash: request.args_hash },
});
if (!decided.data) throw new Error(JSON.stringify(decided.error));
let status = (await api.GET("/api/runs/{run_id}", path)).data;
for (let i = 0; i < 600 && !status?.terminal_reason; i++) {
  await sleep(100);
  status = (await api.GET("/api/runs/{run_id}", path)).data;
}
console.log(JSON.stringify({
  tool: request.tool,
  applied: decided.data.applied,
  terminal_reason: status?.terminal_reason,
  output: status?.output,
}));
"""


async def test_typescript_client_drives_a_run(
    agent: Agent, workspace: Path, capstan_serve: str, tmp_path: Path
) -> None:
    """The generated types with `openapi-fetch`, compiled by strict tsc and run by node: the
    program starts a run, approves its write and reads the result, over a real socket."""
    generator, tsc = npm_bin("openapi-typescript"), npm_bin("tsc")
    node = shutil.which("node")
    assert node is not None  # npm is there (npm_bin skips otherwise), so node is
    await asyncio.to_thread(
        run, generator, tmp_path / "openapi.json", "-o", tmp_path / "api.d.ts", cwd=tmp_path
    )
    (tmp_path / "node_modules").symlink_to(outside.npm_modules("npm-tools", NPM_TOOLS))
    (tmp_path / "drive.mts").write_text(DRIVE_TS)
    config = {
        "compilerOptions": {
            "strict": True,
            "target": "es2022",
            "module": "nodenext",
            "moduleResolution": "nodenext",
            "skipLibCheck": True,
        },
        "files": ["drive.mts"],
    }
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    await asyncio.to_thread(run, tsc, "-p", tmp_path / "tsconfig.json", cwd=tmp_path)
    script = [
        say(call("write_file", path="a.txt", content="from TypeScript")),
        say(call("finish", answer="done")),
    ]
    async with agent.serving(script):
        out = await asyncio.to_thread(
            run, node, tmp_path / "drive.mjs", capstan_serve, TOKEN, cwd=tmp_path
        )
    said = json.loads(out.strip().splitlines()[-1])
    assert said == {
        "tool": "write_file",
        "applied": True,
        "terminal_reason": "completed",
        "output": "done",
    }
    assert (workspace / "a.txt").read_text() == "from TypeScript"


async def poll(get: Any, ready: Any, timeout: float = 60.0) -> Any:
    """`await get()` until `ready(value)`."""
    async with asyncio.timeout(timeout):
        while True:
            value = await get()
            if ready(value):
                return value
            await asyncio.sleep(0.1)


async def test_python_client_drives_a_run(
    agent: Agent, workspace: Path, capstan_serve: str, tmp_path: Path
) -> None:
    """Start a run, wait for its approval request, approve it, read the result: through the
    generated package only, over a real socket."""
    document = tmp_path / "openapi.json"
    client_pkg = generate_python(document, tmp_path)
    api = importlib.import_module("capstan_api_client.api")
    runs = importlib.import_module("capstan_api_client.api.runs")
    steering = importlib.import_module("capstan_api_client.api.steering")
    models = importlib.import_module("capstan_api_client.models")
    for name in ("start_run", "get_run", "list_runs"):
        importlib.import_module(f"{runs.__name__}.{name}")
    for name in ("get_pending", "approve", "deny", "pause"):
        importlib.import_module(f"{steering.__name__}.{name}")
    assert api is not None
    # a body sends what the caller set, nothing more: a default sent back would override an
    # agent definition's value (`agent` + the body's fields)
    assert models.RunRequest(task="write it").to_dict() == {"task": "write it"}

    client = client_pkg.AuthenticatedClient(base_url=capstan_serve, token=TOKEN)
    script = [
        say(call("write_file", path="a.txt", content="from a generated client")),
        say(call("finish", answer="done")),
    ]
    async with agent.serving(script), client:
        body = models.RunRequest(task="write a.txt", max_steps=5)
        started = await runs.start_run.asyncio(client=client, body=body)
        assert isinstance(started, models.StartedRun), started
        run_id = started.run_id

        async def pending() -> Any:
            return await steering.get_pending.asyncio(run_id, client=client)

        view = await poll(pending, lambda p: isinstance(p, models.PendingView) and p.approvals)
        (request,) = view.approvals
        assert request.tool == "write_file"
        decision = models.ApproveBody(request_id=request.request_id, args_hash=request.args_hash)
        result = await steering.approve.asyncio(run_id, client=client, body=decision)
        assert isinstance(result, models.SteerResult), result
        assert result.applied is True

        async def status() -> Any:
            return await runs.get_run.asyncio(run_id, client=client)

        final = await poll(status, lambda s: s.terminal_reason is not None)
        listed = await runs.list_runs.asyncio(client=client)
    assert final.terminal_reason == models.TerminalReason.COMPLETED
    assert final.output == "done" and final.error is None
    assert (workspace / "a.txt").read_text() == "from a generated client"
    (mine,) = [r for r in listed or [] if r.run_id == run_id]  # the server's other runs too
    assert mine.terminal_reason == models.TerminalReason.COMPLETED
