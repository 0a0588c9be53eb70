"""What a worker checks and says when it starts, before it connects to Temporal.

`capstan.worker.run_worker` calls these after its settings are read: a model profile that
cannot resolve is one `ConfigError` line naming it; an unknown `CAPSTAN_*` variable is a
warning with the nearest known name; the tools on offer are logged with their source and
policy. Part of the composition root (it may import the activities); it never connects, starts
or lists anything.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from capstan.activities.providers.profiles import ProfileError, check_profiles
from capstan.activities.tools.jail import SandboxSettings
from capstan.activities.tools.mcp import McpConfig
from capstan.activities.tools.offering import offer_lines, open_to_every_run, unknown_rules
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.spec import ToolRule
from capstan.runtime.api_settings import ApiSettings
from capstan.runtime.config import ConfigError, known_variables, unknown_variables
from capstan.runtime.local_model import available as local_model_available

__all__ = ["check_models", "check_variables", "log_offer"]

log = logging.getLogger("capstan.worker")


def check_models(env: Mapping[str, str]) -> list[str]:
    """Every model profile a run may name without a profile of its own resolves: `CAPSTAN_MODEL`
    and each profile of `CAPSTAN_PROFILES` (else one `ConfigError` line naming it); what may
    only go wrong is returned as warnings."""
    try:
        return check_profiles(env, local_available=local_model_available())
    except ProfileError as exc:
        raise ConfigError(str(exc)) from None


#: Variables Capstan sets for the programs it starts (the jail's), read by them, not by it.
_SET_FOR_PROGRAMS = ("CAPSTAN_IDEMPOTENCY_KEY",)


def check_variables(env: Mapping[str, str]) -> list[str]:
    """A warning for each `CAPSTAN_*` variable nothing reads, with the nearest known name. The
    known ones are the settings classes' fields (`capstan.runtime.config.known_variables`)."""
    known = known_variables([SandboxSettings], _SET_FOR_PROGRAMS)
    if all(name in known for name in env if name.startswith("CAPSTAN_")):
        return []
    return unknown_variables(env, known | known_variables([ApiSettings]))


def log_offer(registry: ToolRegistry, policy: Mapping[str, ToolRule], mcp: McpConfig) -> None:
    """Say what the worker offers: each tool, its source and policy, and the risky defaults."""
    for line in offer_lines(registry, policy, mcp):
        log.info("%s", line)
    warning = open_to_every_run(registry, policy)
    for line in [*unknown_rules(registry, policy, mcp), *([warning] if warning else [])]:
        log.warning("%s", line)
