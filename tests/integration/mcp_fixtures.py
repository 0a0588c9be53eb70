"""What the MCP integration tests share: config files for real servers, a git repository, and a
streamable-HTTP server written with the SDK's server API, on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

BIN = Path(sys.executable).parent
SERVERS = Path(__file__).with_name("mcp_servers.py")
#: git identity for mcp-server-git, passed through by name (`env = [...]` in the MCP file)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Capstan Test",
    "GIT_AUTHOR_EMAIL": "test@capstan.invalid",
    "GIT_COMMITTER_NAME": "Capstan Test",
    "GIT_COMMITTER_EMAIL": "test@capstan.invalid",
}


def time_server() -> str:
    return f"""
[servers.time]
command = "{BIN / "mcp-server-time"}"
args = ["--local-timezone", "UTC"]
"""


def git_server(repo: Path) -> str:
    return f"""
[servers.git]
command = "{BIN / "mcp-server-git"}"
args = ["--repository", "{repo}"]
env = {sorted(GIT_ENV)!r}
deny = ["git_checkout"]
""".replace("'", '"')


def kit_server(state: Path, name: str = "kit", timeout: float = 3.0) -> str:
    return f"""
[servers.{name}]
command = "{sys.executable}"
args = ["{SERVERS}", "testkit", "{state}"]
timeout_seconds = {timeout}
"""


def garbage_server(timeout: float = 3.0) -> str:
    return f"""
[servers.junk]
command = "{sys.executable}"
args = ["{SERVERS}", "garbage"]
timeout_seconds = {timeout}
"""


def write_config(directory: Path, *servers: str) -> Path:
    path = directory / "mcp.toml"
    path.write_text("\n".join(servers))
    return path


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV | {"PATH": "/usr/bin:/bin"}, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


def git_repo(directory: Path) -> Path:
    """A repository with one commit and one staged change (for git_status and git_reset)."""
    repo = directory / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "notes.txt").write_text("first\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    return repo


@dataclass
class HttpServer:
    """A streamable-HTTP MCP server in a thread; `seen` is what its tools observed."""

    url: str
    seen: dict[str, Any] = field(default_factory=dict)
    started: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)


def web_app(server: HttpServer) -> Any:
    mcp: MCPServer = MCPServer("web", log_level="WARNING")

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    async def echo(text: str, ctx: Context) -> str:
        """Echo `text` in capitals."""
        server.seen.setdefault("meta", []).append(dict(ctx.request_context.meta or {}))
        server.seen.setdefault("authorization", []).append((ctx.headers or {}).get("authorization"))
        return text.upper()

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def slow(ctx: Context) -> str:
        """Take a minute."""
        server.started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            server.cancelled.set()
            raise
        return "finished"

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def fail(reason: str) -> str:
        """Fail with an error result."""
        raise ToolError(reason)

    return mcp.streamable_http_app()


def serve_http(port: int) -> Iterator[HttpServer]:
    server = HttpServer(url=f"http://127.0.0.1:{port}/mcp")
    config = uvicorn.Config(web_app(server), host="127.0.0.1", port=port, log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline, "the HTTP MCP server did not start"
        time.sleep(0.05)
    try:
        yield server
    finally:
        running.should_exit = True
        thread.join(timeout=10)
