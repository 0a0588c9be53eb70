"""What every `capstan` command shares: exit codes, one-line errors, JSON output, connecting."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from capstan.client.runs import CapstanClient
from capstan.runtime.config import Settings

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "CliError",
    "Command",
    "client_for",
    "print_json",
]

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_ERROR = 0, 1, 2

Command = Callable[[argparse.Namespace, Settings], Awaitable[int]]


class CliError(Exception):
    """A failure worth one clear line."""


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


async def client_for(settings: Settings) -> CapstanClient:
    try:
        return await asyncio.wait_for(CapstanClient.connect(settings), 10)
    except Exception as exc:
        hint = (
            "start one with `capstan server` (or `capstan worker`)"
            if settings.embedded
            else "check TEMPORAL_ADDRESS"
        )
        raise CliError(f"no Temporal server answers at {settings.address}: {hint}") from exc
