"""MCP servers as tool sources, without a server: the config file, tool names, the risk profile
from annotations, the policy precedence, and results with binary content."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from mcp.types import Tool as McpTool

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.mcp import McpTools, load_mcp, load_mcp_config, server_of, wire_name
from capstan.activities.tools.mcp.catalog import tool_rule, tool_spec
from capstan.activities.tools.mcp.config import McpServerConfig
from capstan.activities.tools.mcp.errors import scrub
from capstan.activities.tools.mcp.results import result_text
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.activity_io import RunToolInput
from capstan.core.spec import ToolRule
from capstan.core.tooling import ToolFailed
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.environment import ConfigError

WIRE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI and Anthropic accept

GOOD = """
[servers.git]
command = "mcp-server-git"
args = ["--repository", "/srv/repo"]
env = ["GIT_AUTHOR_NAME"]
deny = ["git_reset*"]

[servers.git.tools.git_commit]
decision = "ask"
deny_arguments = { message = "(?i)force" }

[servers.search]
url = "https://search.example.com/mcp?key=${SEARCH_KEY}"
headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
timeout_seconds = 20
sensitive = true
"""
ENV = {"GIT_AUTHOR_NAME": "Ada", "SEARCH_TOKEN": "tok-secret-123", "SEARCH_KEY": "k-secret-456"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mcp.toml"
    path.write_text(text)
    return path


def test_a_good_file_names_servers_variables_and_overrides(tmp_path: Path) -> None:
    config = load_mcp_config(write(tmp_path, GOOD), ENV)
    git, search = config.servers["git"], config.servers["search"]
    assert (git.transport, search.transport) == ("stdio", "http")
    assert git.variables() == ("GIT_AUTHOR_NAME",)
    assert search.variables() == ("SEARCH_KEY", "SEARCH_TOKEN")
    assert git.offers("git_status") and not git.offers("git_reset")
    assert tool_rule(git, "git_commit") == ToolRule(
        decision="ask", deny_arguments={"message": "(?i)force"}
    )
    assert tool_rule(git, "git_status") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[servers.git\ncommand = 1", "is not valid TOML"),
        ('[servers.git]\ncommand = "x"\nurl = "http://h/mcp"', "exactly one of `command`"),
        ("[servers.git]\ntimeout_seconds = 5", "exactly one of `command`"),
        ('[servers."git__x"]\ncommand = "x"', "server name 'git__x'"),
        ('[servers."git.x"]\ncommand = "x"', "server name 'git.x'"),
        ('[servers.git]\ncommand = "x"\ncolour = "red"', "colour"),
        ('[servers.git]\ncommand = "x"\nenv = ["NOT A NAME"]', "not one"),
        ('[servers.git]\ncommand = "x"\nenv = ["UNSET_VAR"]', "reads UNSET_VAR, which is not set"),
        ('[servers.git]\ncommand = "x"\nheaders = { A = "b" }', "headers are for HTTP"),
        ('[servers.web]\nurl = "ftp://h/mcp"', "url must be http"),
        ('[servers.web]\nurl = "http://h/${NOPE}"', "reads NOPE"),
        ('[tools.x]\ndecision = "ask"', "unknown top-level keys ['tools']"),
    ],
)
def test_a_broken_file_is_one_line_naming_it(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_mcp_config(path, {})
    message = str(err.value)
    assert message.startswith(f"CAPSTAN_MCP={path}: the MCP file ") and "\n" not in message
    assert problem in message


def test_a_missing_file_and_a_clashing_tool_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"CAPSTAN_MCP=.*missing\.toml: .* cannot be read"):
        load_mcp_config(tmp_path / "missing.toml")
    path = write(tmp_path, '[servers.git]\ncommand = "x"')
    with pytest.raises(ConfigError, match="names server git, and tool git__status exists"):
        load_mcp(path, {}, ["read_file", "git__status"])
    assert load_mcp(None, {}, ["git__status"]).servers == {}


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("git", "git_status", "git__git_status"),
        ("time", "get-current_time", "time__get-current_time"),
        ("fs", "files.read", None),  # a dot: made safe, with a digest of the original
        ("fs", "files/read", None),
        ("x", "t" * 80, None),  # too long for the wire
    ],
)
def test_tool_names_are_wire_safe_and_split_back(server: str, tool: str, expected: str) -> None:
    name = wire_name(server, tool)
    assert WIRE.fullmatch(name) and server_of(name) == server
    if expected is not None:
        assert name == expected
    assert wire_name(server, tool) == name  # deterministic: the same on every worker


def test_unsafe_names_never_collide() -> None:
    assert wire_name("fs", "files.read") != wire_name("fs", "files/read")
    assert wire_name("fs", "files.read") != wire_name("fs", "files_read")
    assert server_of("read_file") is None and server_of("git__") is None


def _tool(name: str, **hints: bool | None) -> McpTool:
    annotations = ToolAnnotations(**hints) if hints else None  # type: ignore[arg-type]
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "title": "args"}
    return McpTool(
        name=name, description=f"{name} it", input_schema=schema, annotations=annotations
    )


def _server(**fields: object) -> McpServerConfig:
    return McpServerConfig.model_validate({"name": "srv", "command": "x", **fields})


@pytest.mark.parametrize(
    ("hints", "read_only", "untrusted", "destructive"),
    [
        ({}, False, True, True),  # no annotations: the spec's defaults, the riskiest reading
        ({"read_only_hint": True}, True, True, False),
        ({"read_only_hint": True, "open_world_hint": False}, True, True, False),
        ({"read_only_hint": False, "destructive_hint": False}, False, True, False),
        ({"read_only_hint": False, "destructive_hint": True}, False, True, True),
        ({"read_only_hint": True, "destructive_hint": True}, False, True, True),  # contradiction
    ],
)
def test_annotations_map_onto_the_risk_profile(
    hints: dict[str, bool], read_only: bool, untrusted: bool, destructive: bool
) -> None:
    spec = tool_spec(_server(), _tool("t", **hints))
    assert (spec.read_only, spec.untrusted_output, spec.sensitive) == (read_only, untrusted, False)
    assert spec.origin is not None and spec.origin.annotations["destructiveHint"] is destructive
    assert spec.name == "srv__t" and "title" not in spec.parameters
    assert "(MCP server srv, tool t)" in spec.description


def test_the_operator_overrides_the_annotations() -> None:
    ro = {"read_only_hint": True, "open_world_hint": False}
    distrusted = tool_spec(_server(trust_annotations=False), _tool("t", **ro))
    assert not distrusted.read_only
    trusted = _server(untrusted_output=False, sensitive=True)
    assert not tool_spec(trusted, _tool("t", **ro)).untrusted_output
    assert tool_spec(trusted, _tool("t", read_only_hint=True)).untrusted_output  # open world
    assert tool_spec(trusted, _tool("t")).sensitive
    forced = _server(tools={"t": {"read_only": True, "sensitive": False, "timeout_seconds": 7}})
    spec = tool_spec(forced, _tool("t"))
    assert spec.read_only and not spec.sensitive
    assert spec.timeout_seconds == 7 + 15 + 5  # call + connect + margin: the call times out first


def test_worker_policy_file_wins_over_the_mcp_file(tmp_path: Path) -> None:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    activities = ToolActivities(
        ToolRegistry(),
        content,
        tmp_path / "ws",
        {"srv__t": ToolRule(decision="deny", deny_arguments={"x": "^b"})},
    )
    spec = tool_spec(_server(), _tool("t"))
    from_file = ToolRule(decision="allow", deny_arguments={"x": "^a"})
    info = activities._info(spec, from_file)
    assert info.policy == "deny" and info.deny_arguments == {"x": "^b"}
    other = spec.model_copy(update={"name": "srv__u"})
    info = activities._info(other, from_file)
    assert info.policy == "allow" and info.deny_arguments == {"x": "^a"}


def test_binary_content_is_stored_as_blobs_and_named_by_ref(tmp_path: Path) -> None:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    png = b"\x89PNG\r\n\x1a\nimage bytes"
    result = CallToolResult(
        content=[
            TextContent(text="caption"),
            ImageContent(data=base64.b64encode(png).decode(), mime_type="image/png"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inside")),
            ResourceLink(uri="file:///b.bin", name="b.bin", mime_type="application/x"),
            ImageContent(data="%%% not base64", mime_type="image/png"),
        ]
    )
    text = result_text(result, content.blobs.put)
    digest = re.search(r"image image/png, 19 bytes, stored as blob sha256:([0-9a-f]{64})", text)
    assert digest is not None and content.read_bytes(digest.group(1)) == png
    assert "caption" in text and "[resource file:///a.txt]\ninside" in text
    assert "[resource link file:///b.bin (b.bin, application/x); not read]" in text
    assert "not base64; not stored" in text and "%%%" not in text
    structured = CallToolResult(content=[], structured_content={"a": 1})
    assert result_text(structured, content.blobs.put) == '{"a": 1}'


def test_secrets_are_scrubbed_from_messages() -> None:
    message = "GET https://h/mcp?key=k-secret-456 failed: Bearer tok-secret-123"
    assert scrub(message, ENV.values()) == "GET https://h/mcp?key=*** failed: Bearer ***"


async def test_calls_are_refused_before_any_server_starts(tmp_path: Path) -> None:
    """Arguments that are not a JSON object never reach a server (none is started here)."""
    path = write(tmp_path, '[servers.srv]\ncommand = "/nonexistent/server"')
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    tools = McpTools(load_mcp_config(path, {}), {}, content)
    request = RunToolInput(
        run_id="r", step=1, call_id="c", name="srv__t", arguments="[1]", idempotency_key="r/1/c"
    )
    outcome = await tools.call(request)
    assert isinstance(outcome, ToolFailed) and outcome.failure == "invalid_arguments"
    missing = await tools.call(request.model_copy(update={"arguments": "{}"}))
    assert isinstance(missing, ToolFailed) and missing.failure == "error"
    assert missing.error == (
        "cannot start MCP server srv: No such file or directory (/nonexistent/server)"
    )
    assert tools.pool._live == {}
