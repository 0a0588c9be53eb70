"""Regexes and schemas from untrusted places do bounded work and never fetch (issue 26).

A pathological pattern is either refused where it enters (one line) or matched in linear time:
the inputs here would take a backtracking engine hours (`^(a|a)+$` on 40 `a`s and a `!` is
~2^40 steps), so each test simply has to finish within the suite's per-test timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from capstan.activities.tools.mcp.config import load_mcp_config
from capstan.core import patterns, schemas
from capstan.core.policy import check_arguments
from capstan.core.spec import RunSpec, ToolRule
from capstan.core.strict import describe_invalid
from capstan.core.tooling import ToolInfo
from capstan.host.policy_file import load_policy
from capstan.runtime.environment import ConfigError

EVIL = "^(a|a)+$"
PATHOLOGICAL = "a" * 40 + "!"
NOT_RE2 = [r"(a)\1", r"^(?=x)", r"(?<!a)b", r"a\Z"]


def schema_of(field: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"text": field}}


# --- patterns ---------------------------------------------------------------------------


def test_a_pathological_pattern_matches_in_linear_time() -> None:
    assert not patterns.search(EVIL, PATHOLOGICAL)
    assert not patterns.search(EVIL, "a" * 200_000 + "!")
    assert patterns.search(EVIL, "aaaa")
    assert patterns.search("^secrets/", "secrets/key") and not patterns.search("^secrets/", "x")


@pytest.mark.parametrize("pattern", [*NOT_RE2, "([a-z", "x" * (patterns.MAX_PATTERN_CHARS + 1)])
def test_a_pattern_re2_cannot_run_is_refused_in_one_line(pattern: str) -> None:
    problem = patterns.pattern_problem(pattern)
    assert problem is not None and "\n" not in problem and len(problem) < 300
    with pytest.raises(patterns.PatternError):
        patterns.compile_pattern(pattern)


@pytest.mark.parametrize("pattern", NOT_RE2)
def test_a_spec_with_a_pattern_re2_cannot_run_is_refused(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RunSpec(task="t", tool_policy={"write_file": {"deny_arguments": {"path": pattern}}})  # type: ignore[dict-item]
    line = describe_invalid(caught.value)
    assert line.startswith("tool_policy.write_file.deny_arguments.path: pattern ")
    assert "RE2" in line and "\n" not in line


def test_the_worker_refuses_a_policy_file_with_such_a_pattern(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.write_file]\ndeny_arguments = { path = "^(?!tmp/)" }\n')
    with pytest.raises(ConfigError) as caught:
        load_policy(policy)
    message = str(caught.value)
    assert "\n" not in message and "deny_arguments.path" in message and "RE2" in message


def test_the_worker_refuses_an_mcp_file_with_such_a_pattern(tmp_path: Path) -> None:
    config = tmp_path / "mcp.toml"
    config.write_text(
        '[servers.git]\ncommand = "git-mcp"\n'
        '[servers.git.tools.git_commit]\ndeny_arguments = { message = "(x)\\\\1" }\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_mcp_config(config)
    assert "\n" not in str(caught.value) and "RE2" in str(caught.value)


# --- deny_arguments in the gate ---------------------------------------------------------


def spec_with(rule: ToolRule | None = None) -> RunSpec:
    return RunSpec(task="t", tool_policy={"write_file": rule} if rule else {})


def test_a_pathological_deny_pattern_in_a_spec_is_checked_in_linear_time() -> None:
    spec = spec_with(ToolRule(deny_arguments={"path": EVIL}))
    assert check_arguments("write_file", ToolInfo(), spec, f'{{"path": "{PATHOLOGICAL}"}}') is None
    denied = check_arguments("write_file", ToolInfo(), spec, '{"path": "aaaa"}')
    assert denied is not None and denied.startswith("policy denies")


def test_worker_deny_patterns_apply_whatever_the_run_sets_for_the_field() -> None:
    worker = ToolInfo(deny_arguments={"path": "^secrets/"})
    spec = spec_with(ToolRule(deny_arguments={"path": "^tmp/"}))
    secret = check_arguments("write_file", worker, spec, '{"path": "secrets/key"}')
    assert secret == "policy denies write_file with path matching '^secrets/'"
    tmp = check_arguments("write_file", worker, spec, '{"path": "tmp/x"}')
    assert tmp == "policy denies write_file with path matching '^tmp/'"
    assert check_arguments("write_file", worker, spec, '{"path": "notes.txt"}') is None


def test_a_recorded_pattern_re2_cannot_run_denies() -> None:
    worker = ToolInfo(deny_arguments={"path": r"(a)\1"})  # from a catalog in an old history
    denied = check_arguments("write_file", worker, spec_with(), '{"path": "aa"}')
    assert denied is not None and denied.startswith("policy denies write_file")


def test_deeply_nested_arguments_are_refused_not_raised() -> None:
    problem = check_arguments("t", ToolInfo(), spec_with(), "[" * 100_000)
    assert problem is not None and problem.startswith("arguments are not valid JSON")


# --- schemas ----------------------------------------------------------------------------


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server a `$ref` points at, counting the requests it gets."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/s.json", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_remote_ref_is_never_fetched(counting_server: tuple[str, list[str]]) -> None:
    url, seen = counting_server
    info = ToolInfo(parameters=schema_of({"$ref": url}))
    problem = check_arguments("mcp__t", info, spec_with(), '{"text": "x"}')
    assert problem is not None and url in problem and "outside itself" in problem
    assert seen == []
    # a relative ref under a remote $id is just as remote
    relative = {"$id": url, "type": "object", "properties": {"text": {"$ref": "other.json"}}}
    assert schemas.check(relative, {"text": "x"}).refused is not None
    assert seen == []


def test_refs_inside_the_schema_still_resolve() -> None:
    schema = {**schema_of({"$ref": "#/$defs/n"}), "$defs": {"n": {"type": "integer"}}}
    assert schemas.check(schema, {"text": 3}) == schemas.Checked()
    assert schemas.check(schema, {"text": "x"}).errors == ("text: 'x' is not of type 'integer'",)


@pytest.mark.parametrize(
    ("schema", "wrong"),
    [
        (schema_of({"type": "string", "pattern": EVIL}), ["text"]),
        ({"type": "object", "patternProperties": {EVIL: {"type": "string"}}}, ["aaaa"]),
        (
            {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
            ["arguments"],
        ),
        ({"type": "object", "propertyNames": {"pattern": EVIL}}, ["arguments", "arguments"]),
    ],
)
def test_schema_regexes_run_in_linear_time(schema: dict[str, Any], wrong: list[str]) -> None:
    checked = schemas.check(schema, {"text": PATHOLOGICAL, PATHOLOGICAL: 1, "aaaa": 2})
    assert checked.refused is None
    assert [e.split(":")[0] for e in checked.errors] == wrong


@pytest.mark.parametrize("pattern", ["([a-z", *NOT_RE2])
def test_a_schema_regex_re2_cannot_run_refuses_the_call(pattern: str) -> None:
    info = ToolInfo(parameters=schema_of({"type": "string", "pattern": pattern}))
    problem = check_arguments("mcp__t", info, spec_with(), '{"text": "x"}')
    assert problem is not None and problem.startswith("mcp__t cannot be called: its schema")
    assert schemas.schema_problem(info.parameters) is not None


def test_a_nested_schema_keyword_cannot_bring_back_pythons_re() -> None:
    nested = {"$schema": "https://json-schema.org/draft/2020-12/schema", "pattern": EVIL}
    checked = schemas.check(schema_of(nested), {"text": PATHOLOGICAL})
    assert checked.refused is not None and "$schema" in checked.refused
    mixed = {"patternProperties": {EVIL: {}}, "unevaluatedProperties": False}
    assert schemas.schema_problem(mixed) is not None


def test_exponential_refs_are_cut_by_counted_steps() -> None:
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(40)
    }
    defs["d40"] = {"type": "string"}
    checked = schemas.check({"$defs": defs, "$ref": "#/$defs/d0"}, "x")
    assert checked.refused is not None and str(schemas.MAX_STEPS) in checked.refused
    assert schemas.check({"$ref": "#"}, {}).refused is not None  # refers to itself without end


def test_schema_size_and_depth_are_bounded() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(schemas.MAX_SCHEMA_DEPTH + 1):
        deep = {"items": deep}
    assert "deeper" in (schemas.schema_problem(deep) or "")
    wide = {"enum": list(range(schemas.MAX_SCHEMA_NODES + 1))}
    assert "values" in (schemas.schema_problem(wide) or "")
