"""Provider limits per model profile, enforced by the Temporal server for the whole fleet.

A profile with a `[limits.NAME]` table in the profiles file (`CAPSTAN_PROFILES`) has its model
calls on a task queue of its own (`capstan.core.models.model_queue`). Every worker polls that
queue and declares the profile's `requests_per_second` to the server as the queue's rate limit
(Temporal's `max_task_queue_activities_per_second`), so the server dispatches at most that many
calls a second however many workers and hosts poll it: no coordinator, no database. An operator
changes the rate at run time with `capstan limits set` (the task queue configuration API, which
overrides what workers declare) and gives it back to the workers with `capstan limits reset`.

A provider's tokens per minute are kept where its replies state them: a reply saying fewer tokens
are left than the call took slows the queue until the stated reset
(`capstan.activities.providers.token_budget`).

`concurrency` caps the calls the fleet runs at once on that queue: the server has no concurrency
limit of its own, so each worker takes its share, the cap divided by the workers the server lists
as polling the queue (at least one each; `capstan.activities.model_queues.FleetShare`).

Example profiles file::

    [profiles.main]
    provider = "openai"
    model = "gpt-4o-mini"

    [limits.main]
    requests_per_second = 5
    concurrency = 8

    [limits.default]       # the profile CAPSTAN_MODEL names
    requests_per_second = 2

Shared by workers (which poll the queues) and clients (`capstan limits`), so it imports no
activity code.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from capstan.core.errors import ConfigError

__all__ = ["DEFAULT_PROFILE", "ProviderLimits", "limits_problem", "load_limits"]

#: The profile `CAPSTAN_MODEL` names, which has no table of its own.
DEFAULT_PROFILE = "default"


class ProviderLimits(BaseModel):
    """One `[limits.NAME]` table. Empty: the profile's calls get their own queue with no rate
    limit (so `capstan limits set` can set one later)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: calls a second the server dispatches to all workers together (None: no limit)
    requests_per_second: float | None = Field(None, gt=0, le=100_000)
    #: calls the fleet runs at once on this profile's queue, shared among its workers (None: no
    #: cap but each worker's slots)
    concurrency: int | None = Field(None, ge=1, le=10_000)


def load_limits(path: Path | None, profiles: Iterable[str]) -> dict[str, ProviderLimits]:
    """The `[limits.NAME]` tables of the profiles file, each naming `default` or one of
    `profiles`; a mistake is one `ConfigError` line naming the file, table and field."""
    if path is None:
        return {}
    where = f"CAPSTAN_PROFILES={path}"
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    tables = data.get("limits", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{where}: `limits` is not a table of `[limits.NAME]` tables")
    known = [DEFAULT_PROFILE, *profiles]
    limits = {}
    for name, raw in tables.items():
        problem = limits_problem(str(name), known)
        if problem is not None:
            raise ConfigError(f"{where}: [limits.{name}]: {problem}")
        try:
            limits[str(name)] = ProviderLimits.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "table"
            raise ConfigError(f"{where}: [limits.{name}] {field}: {first['msg']}") from None
    return limits


def limits_problem(name: str, known: Iterable[str]) -> str | None:
    """Why `name` cannot have limits (it names no profile), with the nearest one; or None."""
    known = list(known)
    if name in known:
        return None
    near = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"no model profile is named {name!r}{hint}; limits name `default` or a [profiles.NAME]"
