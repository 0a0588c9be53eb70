"""A worker's whole configuration, loaded and checked once: `WorkerConfig`.

Everything a worker is built from that can be wrong — the settings, the tool policy file, the
finish guard, the user's tools module, the MCP servers file, the webhooks file, the sandbox jail
— is read here, in one pass, before anything connects: a mistake is one `ConfigError` line
naming the variable or file. `worker.build_worker` then only composes what this holds, and
never reads a file or a variable again.

With `at_start`, it adds what only a real worker process does at start: every model profile a run
may name resolves, the blob store answers, unknown `CAPSTAN_*` variables are warned about, and
the catalog of tools is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from capstan.activities.providers.profiles import profile_names
from capstan.activities.tool_runner import FinishGuard
from capstan.activities.tools.mcp import McpConfig, load_mcp
from capstan.activities.tools.registry import ToolRegistry
from capstan.core.spec import ToolRule
from capstan.host.build_id import build_id
from capstan.host.policy_file import load_policy
from capstan.host.sandbox import sandbox_jail
from capstan.host.startup import check_models, check_variables, log_offer
from capstan.host.user_code import build_registry, load_finish_guard
from capstan.runtime.blobs import blob_store_for, check_blob_store
from capstan.runtime.config import ModelSettings, Settings
from capstan.runtime.provider_limits import ProviderLimits, load_limits
from capstan.runtime.webhooks import WebhookConfig, load_webhooks

__all__ = ["WorkerConfig", "load_worker_config"]

log = logging.getLogger("capstan.worker")


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker is built from, every part checked. `env` is the worker's environment (the
    model profiles' keys and the hooks' secrets are read from it per call, never copied)."""

    settings: Settings
    env: Mapping[str, str]
    policy: dict[str, ToolRule]
    finish_guard: FinishGuard | None
    registry: ToolRegistry
    mcp: McpConfig
    hooks: WebhookConfig
    build_id: str
    #: the model profiles whose calls have a queue of their own, paced by the server
    limits: Mapping[str, ProviderLimits] = field(default_factory=dict)


def load_worker_config(
    settings: Settings, env: Mapping[str, str], *, jail: bool = True, at_start: bool = False
) -> WorkerConfig:
    """Read and check every part of a worker's configuration, in the order a person fixes
    them. `at_start`: also what a worker process checks and says before it connects (see the
    module docstring). `jail=False` skips probing the sandbox (the shell and Python tools are
    then not offered)."""
    models = ModelSettings.from_env(env)
    doubts = check_models(env) if at_start else []  # every profile a run may name resolves
    limits = load_limits(models.profiles_file, profile_names(models.profiles_file))
    policy = load_policy(settings.policy_file)
    finish_guard = load_finish_guard(settings.finish_guard)
    # MCP names are checked against the tools a worker offers with or without a jail
    mcp = load_mcp(settings.mcp_file, env, build_registry(settings.tools_module).names())
    hooks = load_webhooks(settings.webhooks_file, env)  # every URL and secret resolves
    if at_start:
        check_blob_store(blob_store_for(settings), settings)  # reachable, bucket, keys valid
        for line in [*check_variables(env), *doubts]:
            log.warning("%s", line)
    # the jail's probe last: it may warn, and a mistake above is the one line a worker prints
    registry = build_registry(settings.tools_module, sandbox_jail(settings, env) if jail else None)
    if at_start:
        log_offer(registry, policy, mcp)
    return WorkerConfig(
        settings=settings,
        env=env,
        policy=policy,
        finish_guard=finish_guard,
        registry=registry,
        mcp=mcp,
        hooks=hooks,
        build_id=settings.build_id or build_id(),
        limits=limits,
    )
