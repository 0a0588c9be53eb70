"""The `capstan` commands: each one's name, help line and the modules that build and run it.

The top-level parser is built from this table alone, and only the modules of the command being
run are imported: `capstan --help` loads no client, `capstan schema steer` no Temporal, and no
command pays for another's imports (`bench/cli_start.py`; issue 28's start target).
`tests/unit/test_cli_commands.py` checks that the table and the modules agree: every command
here is registered by its modules with this help, and nothing else is.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capstan.runtime.config import Settings

__all__ = [
    "COMMANDS",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "Command",
    "CommandEntry",
    "Parsers",
    "register",
]

#: Exit codes: success; the run ended but not `completed`; an error (one line on stderr).
EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_ERROR = 0, 1, 2

#: What a command runs: its parsed arguments and the settings -> the exit code.
Command = Callable[[argparse.Namespace, "Settings"], Awaitable[int]]


@dataclass(frozen=True)
class CommandEntry:
    """One command: its help line, and the modules whose `register(parsers)` build it (in
    order: a later module may refine what an earlier one built, as `thread` does to `send`)."""

    help: str
    modules: tuple[str, ...]


_RUNS = ("capstan.cli.runs",)
_STEER = ("capstan.cli.steering",)
_AUDIT = ("capstan.cli.audit",)
_PROCESSES = ("capstan.cli.processes",)

#: Every command, in the order `capstan --help` lists them.
COMMANDS: Mapping[str, CommandEntry] = {
    "run": CommandEntry("start an agent run and print its id (or wait for its result)", _RUNS),
    "status": CommandEntry("phase, step, terminal reason, output and usage of a run", _RUNS),
    "transcript": CommandEntry("every step of a run with refs resolved", _RUNS),
    "ls": CommandEntry("list runs, newest first, with how each ended", _RUNS),
    "watch": CommandEntry(
        "follow a run's events as they happen, until it ends", ("capstan.cli.watching",)
    ),
    "fork": CommandEntry(
        "a new run from another run's conversation after step N (no prefix call repeated)",
        ("capstan.cli.fork",),
    ),
    "eval": CommandEntry(
        "run a dataset of cases, score them, compare with a baseline report",
        ("capstan.cli.evals",),
    ),
    # the generated steering commands: their help is their input type's `wire.help` (the API's
    # route summary too); the test above keeps the two equal
    "pause": CommandEntry("pause at the next step boundary", _STEER),
    "resume": CommandEntry("resume a paused run", _STEER),
    "cancel": CommandEntry("end a run at its next step boundary", _STEER),
    "send": CommandEntry(
        "send a message the model reads at its next step", (*_STEER, "capstan.cli.thread")
    ),
    "answer": CommandEntry("answer a question the agent asked", _STEER),
    "grant": CommandEntry("give a run at its step limit N more steps (0 ends it)", _STEER),
    "grant-budget": CommandEntry("raise a spent budget of a waiting run", _STEER),
    "approve": CommandEntry("approve (or edit, or always approve) a tool call", _STEER),
    "deny": CommandEntry("deny a tool call; the reason is what the model sees", _STEER),
    "pending": CommandEntry("what runs wait for: approvals, questions, steps, resume", _STEER),
    "thread": CommandEntry(
        "conversations that go on across runs: ls, show, send", ("capstan.cli.thread",)
    ),
    "deploy": CommandEntry(
        "worker deployments: status, promote a build, drain the old one",
        ("capstan.cli.deploy",),
    ),
    "limits": CommandEntry(
        "provider limits the server enforces for every worker: show, set, reset",
        ("capstan.cli.limits",),
    ),
    "schedule": CommandEntry(
        "runs on a cron or an interval (Temporal Schedules)", ("capstan.cli.schedule",)
    ),
    "audit": CommandEntry(
        "a verified, tamper-evident trail of everything a run saw and did", _AUDIT
    ),
    "replay": CommandEntry("replay a run's history against the current code", _AUDIT),
    "export-history": CommandEntry("write a run's history (JSON) for replay tests", _AUDIT),
    "codec-server": CommandEntry(
        "decrypt payloads for the Temporal Web UI", ("capstan.cli.codec",)
    ),
    "schema": CommandEntry(
        "print the JSON Schema of a wire shape (steer, run-spec, ...)", ("capstan.cli.schema",)
    ),
    "mcp": CommandEntry(
        "durable runs as MCP tools for model clients (stdio, or --http)", ("capstan.cli.mcp_serve",)
    ),
    "server": CommandEntry("run the embedded Temporal dev server (and its Web UI)", _PROCESSES),
    "worker": CommandEntry("run a worker (starting the embedded server if needed)", _PROCESSES),
    "model": CommandEntry("serve the bundled offline model: `capstan model serve`", _PROCESSES),
    "serve": CommandEntry("the HTTP API, live event streams and the approval inbox", _PROCESSES),
    "demo": CommandEntry(
        "a run that survives a killed worker, an approval and an audit", _PROCESSES
    ),
}


class Parsers:
    """What a command module's `register` adds its commands to.

    Built for one chosen command (`only`), it attaches only that command's parser: the module's
    other commands get a detached parser that is never used, so a module registers its commands
    the same way whichever of them runs. With `only=None` every command is built (tests).
    """

    def __init__(
        self, sub: argparse._SubParsersAction[argparse.ArgumentParser], only: str | None
    ) -> None:
        self._sub = sub
        self._only = only
        self._full: set[str] = set()  # the commands this build attached in full

    def add(self, name: str, fn: Command) -> argparse.ArgumentParser:
        """The parser of command `name` (its help from `COMMANDS`), running `fn`."""
        text = COMMANDS[name].help  # a command missing from the table is a KeyError here
        if self._only is not None and name != self._only:
            return argparse.ArgumentParser(prog=f"capstan {name}", add_help=False)
        p = self._sub.add_parser(name, help=text, description=text)
        p.set_defaults(fn=fn)
        self._full.add(name)
        return p

    def built(self, name: str) -> argparse.ArgumentParser | None:
        """The parser of `name`, if this build attached it in full (never a help-line stub)."""
        return self._sub.choices.get(name) if name in self._full else None

    def replace(self, name: str, parser: argparse.ArgumentParser) -> None:
        """Attach `parser` as command `name` in place of the one built before."""
        self._sub.choices[name] = parser


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], only: str | None) -> None:
    """Add the commands to `sub`: `only` built in full (importing its modules), the others as
    a name and a help line (all of them when `only` names none); `only=None`: every command in
    full."""
    parsers = Parsers(sub, only)
    if only is None:
        modules = dict.fromkeys(m for entry in COMMANDS.values() for m in entry.modules)
        for module in modules:
            importlib.import_module(module).register(parsers)
        return
    for name, entry in COMMANDS.items():
        if name == only:
            for module in entry.modules:
                importlib.import_module(module).register(parsers)
        else:
            sub.add_parser(name, help=entry.help, description=entry.help)
