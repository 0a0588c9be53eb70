"""`capstan`: start, watch and inspect runs; run the worker or the embedded server.

Every command talks to `TEMPORAL_ADDRESS` or the embedded default (127.0.0.1:7233). An error is
one line on stderr and a non-zero exit. `--json` output shapes are documented in the README.

This module stays light: the parser comes from the command table (`capstan.cli.commands`) and
only the chosen command's modules are imported.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from capstan.cli.commands import COMMANDS, EXIT_ERROR, EXIT_OK, register
from capstan.core.errors import CapstanError

__all__ = ["build_parser", "main"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("capstan")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Version(argparse.Action):
    """`--version`, looking the version up only when asked (package metadata costs ~20 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"capstan {_version()}")  # on stdout, as argparse's own `version` action
        parser.exit()


def _command_in(argv: list[str]) -> str | None:
    """The command `argv` names (its first word), if it names one."""
    first = argv[0] if argv else None
    return first if first in COMMANDS else None


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The `capstan` parser: `command` built in full and the others as a help line (with no
    command, help lines only), or every command in full with `every`."""
    parser = argparse.ArgumentParser(prog="capstan", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub, None if every else command or "")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = _command_in(argv)
    if command == "worker":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    else:  # a command's warnings read like its errors: one line, `capstan: ...`
        logging.basicConfig(level=logging.WARNING, format="capstan: %(message)s")
    try:
        # with no command named, a parser of help lines only: `--help`, `--version` and a
        # mistyped command import nothing else (a command's module that cannot be imported
        # is one line below, as any other error)
        args = build_parser(command).parse_args(argv)
        import asyncio

        from capstan.runtime.config import Settings

        code = asyncio.run(args.fn(args, Settings.from_env()))
    except CapstanError as exc:  # every error Capstan raises on purpose (capstan.core.errors)
        print(f"capstan: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # the reader went away (`capstan pending | head -1`): what it wanted was printed
        code = _reader_gone()
    except Exception as exc:
        print(f"capstan: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    code = _flushed(code)
    # Leave without interpreter finalisation: the Temporal core runtime's native threads can
    # abort the process (SIGABRT) while Python tears down, turning a successful command into a
    # crash (seen here on short-lived commands). Everything worth keeping is flushed first.
    os._exit(code)


def _reader_gone() -> int:
    """Point stdout at /dev/null so nothing more is written to the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK


def _flushed(code: int) -> int:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone() if code == EXIT_OK else code
    sys.stderr.flush()
    return code
