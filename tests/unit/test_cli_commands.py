"""The `capstan` command table (`capstan.cli.commands`) and the command modules agree, and a
command's start imports only what that command needs (issue 28: `bench/cli_start.py`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

from capstan.cli.commands import COMMANDS
from capstan.cli.main import build_parser
from capstan.core.steering import STEERING_TYPES


def _commands(parser: argparse.ArgumentParser) -> tuple[dict[str, Any], dict[str, str]]:
    sub = next(a for a in parser._actions if a.dest == "command")
    helps = {a.dest: a.help for a in sub._choices_actions}  # type: ignore[attr-defined]
    return sub.choices, helps  # type: ignore[return-value]


def test_the_modules_register_exactly_the_table() -> None:
    choices, helps = _commands(build_parser(every=True))
    assert list(choices) == list(COMMANDS)
    assert helps == {name: entry.help for name, entry in COMMANDS.items()}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_is_built_in_full_from_its_own_modules(name: str) -> None:
    full, _ = _commands(build_parser(every=True))
    alone, helps = _commands(build_parser(name))
    assert list(alone) == list(COMMANDS)  # `--help` lists every command whichever is chosen
    assert helps[name] == COMMANDS[name].help
    # the chosen command's parser takes the same arguments as in the full build
    assert alone[name].format_usage() == full[name].format_usage()


def test_the_generated_steering_commands_keep_their_types_help() -> None:
    """The API's route summary and the CLI's help line say the same thing."""
    for kind in STEERING_TYPES:
        if not kind.wire.custom_cli:
            (command,) = kind.wire.commands
            assert COMMANDS[command].help == kind.wire.help


_LOADED = """
import runpy, sys
sys.argv = ["capstan", *sys.argv[1:]]
try:
    runpy.run_module("capstan", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(*argv: str) -> set[str]:
    """The modules `capstan ARGV` imported, in a fresh interpreter (ARGV must exit 0 through
    argparse, as `--help` and `--version` do)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, check=True
    )
    return set(done.stderr.split())


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_import_no_command(argv: list[str]) -> None:
    loaded = _imported(*argv)
    heavy = ("temporalio", "pydantic", "asyncio", "capstan.client", "capstan.runtime")
    assert not {m for m in loaded if m.startswith(heavy)}
    assert {m for m in loaded if m.startswith("capstan.")} <= {
        "capstan.cli",
        "capstan.cli.main",
        "capstan.cli.commands",
        "capstan.core",
        "capstan.core.errors",
    }


def test_a_command_imports_neither_another_commands_module_nor_jsonschema() -> None:
    loaded = _imported("status", "--help")
    assert "capstan.cli.runs" in loaded
    others = {m for entry in COMMANDS.values() for m in entry.modules} - {
        "capstan.cli.runs",
        "capstan.cli.thread",  # `run --thread`
    }
    assert not loaded & others
    # tool schemas are validated by workers; a client command never loads jsonschema
    assert not {m for m in loaded if m.startswith(("jsonschema", "referencing"))}
    # a client reads and sends the wire types only, never the loop's state or activity types
    # (`capstan.core.workflow_io.StartInput`; issue 28's start target)
    loop_types = {
        "capstan.core.state",
        "capstan.core.agent_input",
        "capstan.core.inputs",
        "capstan.core.activity_table",
        "capstan.core.activity_io",
    }
    assert not loaded & loop_types


def test_a_module_refines_only_what_this_build_made_in_full() -> None:
    """`thread` refines `send` when `send` is built; when `thread` alone is, `send` stays the
    help line it was (not a parser with nothing to run)."""
    choices, _ = _commands(build_parser("thread"))
    assert choices["send"].get_default("fn") is None
    assert choices["send"].format_usage().split() == ["usage:", "capstan", "send", "[-h]"]
    choices, _ = _commands(build_parser("send"))
    assert choices["send"].get_default("fn") is not None
