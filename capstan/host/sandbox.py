"""The jail `run_shell` and `run_python` run in, probed once at start: the worker says why the
tools are not offered when it cannot jail them (code never runs unjailed)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from capstan.activities.tools.jail import Jail, JailUnavailable, SandboxSettings, probe_jail
from capstan.activities.tools.jail_reach import workspace_block
from capstan.activities.tools.workspaces import tenants_root
from capstan.runtime.config import Settings

__all__ = ["sandbox_jail"]

log = logging.getLogger("capstan.worker")


def sandbox_jail(settings: Settings, env: Mapping[str, str]) -> Jail | None:
    """The jail for `run_shell` / `run_python`, or None, said once at start with the reason:
    code never runs unjailed."""
    sandbox = SandboxSettings.from_env(env)
    blocked = workspace_block(settings.workspace_dir, sandbox)  # bwrap: only "Permission denied"
    if blocked is not None:
        log.warning("run_shell and run_python are not offered: %s", blocked)
        return None
    jail = probe_jail(
        sandbox,
        settings.workspace_dir,
        hidden=[
            *(p for p in (settings.data_dir, settings.codec_key_file) if p is not None),
            tenants_root(settings.workspace_dir),  # the other tenants' workspaces
        ],
    )
    if isinstance(jail, JailUnavailable):
        log.warning("run_shell and run_python are not offered: %s", jail.reason)
        return None
    if jail.network_unavailable is not None:  # such calls run without network, never the host's
        log.log(
            logging.ERROR if settings.sandbox_network else logging.INFO,
            "sandbox.network: jails get no network on this worker: %s",
            jail.network_unavailable,
        )
    if jail.python is None:
        log.warning("run_python is not offered: the jail has no python3")
    if not jail.writable:
        log.warning(
            "run_shell and run_python can only read the workspace: uid %s may not write it",
            jail.user[0] if jail.user else os.geteuid(),
        )
    return jail
