"""An argument parser that takes positionals after options too.

Plain argparse matches an optional positional (`TASK`, `nargs="?"`) as absent at the first
positional it meets, then refuses the text that follows the options:
`capstan schedule create NAME --every 1h "task"`. Intermixed parsing reads it as meant.
"""

from __future__ import annotations

import argparse

__all__ = ["IntermixedParser"]


class IntermixedParser(argparse.ArgumentParser):
    """`parse_known_args` as `parse_known_intermixed_args` (no sub-commands below it)."""

    _inner = False

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inner:  # parse_known_intermixed_args calls back here
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False
