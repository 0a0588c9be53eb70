"""Provider limits of the fleet, read and changed on the Temporal server (`capstan limits`).

Example::

    limits = Limits(await CapstanClient.connect())
    await limits.set("main", 2.5)            # every worker's `main` calls: 2.5 a second
    for shown in await limits.show():
        print(shown.profile, shown.now.rate, shown.now.source)
    await limits.reset("main")              # back to what the workers' [limits.main] says

`show()` lists the profiles with limits in the profiles file (`CAPSTAN_PROFILES`) this process
has; any other profile is shown or changed when named and a worker serves its queue. What the
server enforces, and why, is `capstan.runtime.queue_config`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from capstan.client.runs import CapstanClient
from capstan.core.errors import ConfigError
from capstan.core.models import model_queue
from capstan.runtime.config import ModelSettings
from capstan.runtime.provider_limits import ProviderLimits, limits_problem, load_limits
from capstan.runtime.queue_config import QueueLimit, read_limit, write_rate

__all__ = ["MAX_RATE", "Limits", "LimitsError", "ProfileLimit"]

#: the largest rate an operator may set (the server's own ceiling is far below)
MAX_RATE = 100_000.0


class LimitsError(ConfigError):
    """A limits command that cannot be carried out; the message says why in one line."""


@dataclass(frozen=True)
class ProfileLimit:
    """One profile's queue: what its workers declare and what the server enforces now."""

    profile: str
    queue: str
    #: its `[limits.NAME]` table in this process's profiles file (None: not known here)
    configured: ProviderLimits | None
    now: QueueLimit


class Limits:
    """Read and change the rates of the model queues of limited profiles."""

    def __init__(self, capstan: CapstanClient) -> None:
        self.capstan = capstan

    def configured(self) -> dict[str, ProviderLimits]:
        """The `[limits.NAME]` tables of the profiles file this process is configured with."""
        path = ModelSettings.from_env().profiles_file
        return load_limits(path, _profiles_in(path))

    async def show(self, profiles: Iterable[str] = ()) -> list[ProfileLimit]:
        """Each named profile (default: every configured one) with its queue's rate now."""
        configured = self.configured()
        names = list(profiles) or sorted(configured)
        shown = []
        for name in names:
            queue = self.queue(name)
            now = await read_limit(self.capstan.client, queue)
            if name not in configured and now.pollers == 0:
                raise LimitsError(self._unknown(name, configured))
            shown.append(ProfileLimit(name, queue, configured.get(name), now))
        return shown

    async def set(self, profile: str, rate: float) -> QueueLimit:
        """Make the server dispatch at most `rate` calls a second of `profile`, overriding
        what its workers declare, until `reset`."""
        if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
            raise LimitsError(f"a rate is calls a second, above 0 and at most {MAX_RATE:g}")
        queue = await self._known(profile)
        await write_rate(self.capstan.client, queue, rate, identity=self.capstan.settings.identity)
        return await read_limit(self.capstan.client, queue)

    async def reset(self, profile: str) -> QueueLimit:
        """Give `profile`'s queue back to the rate its workers declare."""
        queue = await self._known(profile)
        await write_rate(self.capstan.client, queue, None, identity=self.capstan.settings.identity)
        return await read_limit(self.capstan.client, queue)

    def queue(self, profile: str) -> str:
        return model_queue(self.capstan.settings.task_queue, profile)

    async def _known(self, profile: str) -> str:
        """The queue of `profile` when it has limits here or a worker serves its queue."""
        configured = self.configured()
        queue = self.queue(profile)
        if profile in configured:
            return queue
        if (await read_limit(self.capstan.client, queue)).pollers == 0:
            raise LimitsError(self._unknown(profile, configured))
        return queue

    def _unknown(self, profile: str, configured: dict[str, ProviderLimits]) -> str:
        path = ModelSettings.from_env().profiles_file
        problem = limits_problem(profile, ["default", *_profiles_in(path)]) if path else None
        queue = self.queue(profile)
        return (
            f"profile {profile!r} has no limits: "
            + (f"{problem}; " if problem else "")
            + f"no worker serves its queue {queue!r} (a profile needs a [limits.{profile}] table "
            "in the workers' profiles file, CAPSTAN_PROFILES)"
        )


def _profiles_in(path: Path | None) -> list[str]:
    """The profile names of the profiles file at `path` (none when there is none)."""
    if path is None:
        return []
    try:
        with path.open("rb") as fh:
            tables = tomllib.load(fh).get("profiles", {})
    except (OSError, tomllib.TOMLDecodeError):
        return []  # load_limits says what is wrong with it
    return [str(name) for name in tables] if isinstance(tables, dict) else []
