"""The worker's MCP servers (`CAPSTAN_MCP=mcp.toml`): what to start or dial, how far to trust it.

Example::

    [servers.git]                       # the name prefixes its tools: git__git_status
    command = "mcp-server-git"          # stdio: a process per worker, started on first use
    args = ["--repository", "/srv/repo"]
    env = ["GIT_AUTHOR_NAME"]           # passed through BY NAME from the worker's environment
    timeout_seconds = 60                # one call; the run's activity allows a little more
    deny = ["git_reset"]                # the server's tool names, `*` globs allowed

    [servers.git.tools.git_commit]      # per tool: policy and risk overrides
    decision = "ask"

    [servers.search]
    url = "https://search.example.com/mcp"                   # streamable HTTP
    headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }   # ${VAR}: the worker's environment
    sensitive = true

Secrets never leave the worker: the file names variables, their values are read when a
connection opens (inside an activity) and scrubbed from every message that could reach history.
A file that cannot be used is one `ConfigError` line naming it, raised when the worker starts.
Never starts or dials anything.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from capstan.activities.tools.mcp.naming import server_of
from capstan.core.patterns import Pattern
from capstan.runtime.environment import ConfigError, validation_summary

__all__ = [
    "McpConfig",
    "McpServerConfig",
    "McpToolOverride",
    "load_mcp",
    "load_mcp_config",
    "resolve_template",
    "template_variables",
]

#: A server name: a prefix every provider accepts in a tool name, never containing the `__`
#: that separates it from the tool's own name.
SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*$")
MAX_SERVER_NAME = 24
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpToolOverride(BaseModel):
    """The operator's word on one tool, over what the server's annotations say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["allow", "ask", "deny"] | None = None
    deny_arguments: dict[str, Pattern] = {}  # RE2: refused at load unless it compiles
    read_only: bool | None = None
    sensitive: bool | None = None
    untrusted_output: bool | None = None
    timeout_seconds: float | None = Field(None, gt=0)


class McpServerConfig(BaseModel):
    """One server: over stdio (`command`) or streamable HTTP (`url`), and its trust settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    timeout_seconds: float = Field(60.0, gt=0, le=3600)
    connect_timeout_seconds: float = Field(15.0, gt=0, le=25)
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    #: the server reaches private data: counts as sensitive for the Rule of Two
    sensitive: bool = False
    #: fence the server's output for the model (a tool with `openWorldHint` is always fenced)
    untrusted_output: bool = True
    #: read `readOnlyHint` from the server; false: every tool counts as changing state
    trust_annotations: bool = True
    tools: dict[str, McpToolOverride] = {}

    @field_validator("env")
    @classmethod
    def _names_only(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"env lists variable names, and {name!r} is not one")
        return names

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def offers(self, tool: str) -> bool:
        """Whether the operator lets the server's tool `tool` be offered at all."""
        if any(fnmatchcase(tool, pattern) for pattern in self.deny):
            return False
        return self.allow is None or any(fnmatchcase(tool, p) for p in self.allow)

    def variables(self) -> tuple[str, ...]:
        """Every variable of the worker's environment this server reads."""
        named = [*self.env, *template_variables(self.url or "")]
        for value in self.headers.values():
            named += template_variables(value)
        return tuple(dict.fromkeys(named))


class McpConfig(BaseModel):
    """Every configured server, by name (the name is the prefix of its tools)."""

    model_config = ConfigDict(frozen=True)

    servers: dict[str, McpServerConfig] = {}
    source: str = ""

    def clashing(self, names: Iterable[str]) -> list[str]:
        """Other tools' names that read as one of these servers' (`git__x` with a server git)."""
        return [name for name in names if server_of(name) in self.servers]

    def missing_variables(self, env: Mapping[str, str]) -> list[str]:
        return [
            f"server {name} reads {var}, which is not set in the worker's environment"
            for name, server in self.servers.items()
            for var in server.variables()
            if not env.get(var)
        ]


def load_mcp(path: Path | None, env: Mapping[str, str], taken: Iterable[str]) -> McpConfig:
    """`load_mcp_config`, and no other tool's name may read as one of these servers' tools."""
    config = load_mcp_config(path, env)
    clashes = config.clashing(taken)
    if path is not None and clashes:
        raise _error(path, f"names server {server_of(clashes[0])}, and tool {clashes[0]} exists")
    return config


def template_variables(text: str) -> list[str]:
    return _VARIABLE.findall(text)


def resolve_template(text: str, env: Mapping[str, str]) -> str:
    """`text` with each `${VAR}` replaced by the variable's value in `env`."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1), ""), text)


def load_mcp_config(path: Path | None, env: Mapping[str, str] | None = None) -> McpConfig:
    """Read `CAPSTAN_MCP`; with `env`, also check that every variable it names is set."""
    if path is None:
        return McpConfig()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        config = _parse(data, str(path))
    except OSError as exc:
        raise _error(path, f"cannot be read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _error(path, f"is not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise _error(path, f"has an invalid server: {validation_summary(exc)}") from None
    except ValueError as exc:
        raise _error(path, str(exc)) from None
    missing = config.missing_variables(env) if env is not None else []
    if missing:
        raise _error(path, "; ".join(missing))
    return config


def _parse(data: dict[str, object], source: str) -> McpConfig:
    unknown = sorted(set(data) - {"servers"})
    if unknown:
        raise ValueError(f"has unknown top-level keys {unknown}: servers go in [servers.NAME]")
    tables = data.get("servers", {})
    if not isinstance(tables, dict):
        raise ValueError("is not a table of [servers.NAME]")
    servers = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ValueError(f"[servers.{name}] is not a table")
        if not SERVER_NAME.fullmatch(name) or len(name) > MAX_SERVER_NAME:
            raise ValueError(
                f"server name {name!r} must be letters, digits, '-' and single '_' "
                f"(at most {MAX_SERVER_NAME}, starting with a letter): it prefixes tool names"
            )
        server = McpServerConfig.model_validate({**table, "name": name})
        if (server.command is None) == (server.url is None):
            raise ValueError(f"server {name} needs exactly one of `command` (stdio) or `url`")
        if server.command is None and (server.args or server.env or server.cwd):
            raise ValueError(f"server {name}: args, env and cwd are for stdio servers")
        if server.command is not None and server.headers:
            raise ValueError(f"server {name}: headers are for HTTP servers")
        if server.url is not None and not server.url.startswith(("http://", "https://")):
            raise ValueError(f"server {name}: url must be http:// or https://")
        servers[name] = server
    return McpConfig(servers=servers, source=source)


def _error(path: Path, problem: str) -> ConfigError:
    return ConfigError(f"CAPSTAN_MCP={path}: the MCP file {problem}")
