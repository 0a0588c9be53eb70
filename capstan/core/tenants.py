"""Who owns what: tenant names, thread workflow ids and workspace keys, in one place.

Tenants share nothing, and every name that could let one reach another's is made here:

- a thread's workflow id: `thread-<thread>` for the `default` tenant (the CLI's and the Python
  client's, as before), `thread-<tenant>:<thread>` for any other. Neither a tenant name nor a
  thread name may hold `:`, so the mapping is injective: no (tenant, thread) pair can name
  another's workflow. Run ids that start with `thread-` are reserved for threads
  (`reserved_run_id`): a caller choosing its own run id can never squat one.
- a run's workspace key (`RunSpec.workspace`, set by Capstan only): None for the `default`
  tenant (the worker's workspace root, as before), `<tenant>` for another tenant's runs,
  `<tenant>/threads/<thread>` for its threads' runs. `workspace_parts` checks a key before the
  worker maps it to a directory (`TENANTS_DIR/<parts...>/WORKSPACE_LEAF` below its root).

Pure: no IO. Refusals raise `TenantError` with a one-line reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "DEFAULT_TENANT",
    "MAX_KEY_CHARS",
    "TENANTS_DIR",
    "TENANT_MEMO",
    "TENANT_PATTERN",
    "THREAD_PATTERN",
    "THREAD_PREFIX",
    "WORKSPACE_LEAF",
    "TenantError",
    "check_tenant",
    "reserved_run_id",
    "run_workspace_key",
    "tenant_of_memo",
    "thread_workflow_id",
    "workspace_key",
    "workspace_parts",
    "workspace_subdir",
]

DEFAULT_TENANT = "default"
#: the memo entry naming a run's tenant (absent: `default`); kept across continue-as-new
TENANT_MEMO = "capstan_tenant"
THREAD_PREFIX = "thread-"
#: letters, digits, `.`, `_`, `@`, `-`, starting with a letter or digit; never `:` or `/`
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
THREAD_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_TENANT = re.compile(TENANT_PATTERN)
_THREAD = re.compile(THREAD_PATTERN)
#: one component of a workspace key (a tenant, `threads`, a thread name)
_KEY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")
MAX_KEY_PARTS = 8
MAX_KEY_CHARS = 512
#: the workflow ids the API can address (`capstan.api.tenancy.RUN_ID_PATTERN`) are this long
_MAX_WORKFLOW_ID = 200
#: below the worker's workspace root: every non-default workspace lives here (hidden from the
#: default tenant's runs); the directories on the way are the worker's, only the leaf is a
#: workspace, so no run can swap a directory on the way to another's
TENANTS_DIR = ".capstan-tenants"
WORKSPACE_LEAF = ".workspace"


class TenantError(ValueError):
    """A tenant name, thread name or workspace key that cannot be used, with the reason."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "…")


def check_tenant(tenant: str) -> str:
    """`tenant` if it is a usable tenant name; TenantError otherwise."""
    if not _TENANT.fullmatch(tenant):
        raise TenantError(
            f"bad tenant {_shown(tenant)}: letters, digits, '.', '_', '@' and '-' (at most "
            "64), starting with a letter or digit"
        )
    return tenant


def tenant_of_memo(memo: Mapping[str, object]) -> str:
    """The tenant a workflow's memo names (`default` when it names none)."""
    tenant = memo.get(TENANT_MEMO)
    return tenant if isinstance(tenant, str) and tenant else DEFAULT_TENANT


def thread_workflow_id(thread: str, tenant: str = DEFAULT_TENANT) -> str:
    """The workflow id every run of the tenant's `thread` has; TenantError names a bad name."""
    if not _THREAD.fullmatch(thread):
        raise TenantError(
            f"bad thread id {_shown(thread)}: letters, digits, '.', '_' and '-' (at most 200), "
            "starting with a letter or digit"
        )
    if tenant == DEFAULT_TENANT:
        return THREAD_PREFIX + thread
    scoped = f"{THREAD_PREFIX}{check_tenant(tenant)}:{thread}"
    if len(scoped) > _MAX_WORKFLOW_ID:
        raise TenantError(f"thread id {_shown(thread)} is too long for tenant {tenant!r}")
    return scoped


def reserved_run_id(run_id: str) -> bool:
    """Whether `run_id` is a thread's (only `thread_workflow_id` may make one)."""
    return run_id.startswith(THREAD_PREFIX)


def workspace_key(tenant: str, thread: str | None = None) -> str | None:
    """The workspace key of the tenant's runs (of its `thread`'s runs): None for `default`,
    whose runs keep the worker's workspace root."""
    if tenant == DEFAULT_TENANT:
        return None
    check_tenant(tenant)
    if thread is None:
        return tenant
    thread_workflow_id(thread, tenant)  # checks the name
    return f"{tenant}/threads/{thread}"


def workspace_parts(key: str) -> tuple[str, ...]:
    """The components of a workspace key, each a plain name (no `.`, `..`, `/`, NUL, leading
    dot, nothing absolute); TenantError otherwise."""
    if len(key) > MAX_KEY_CHARS:
        raise TenantError(f"workspace key {_shown(key)} is too long (at most {MAX_KEY_CHARS})")
    parts = tuple(key.split("/"))
    if len(parts) > MAX_KEY_PARTS:
        raise TenantError(f"workspace key {_shown(key)} has more than {MAX_KEY_PARTS} parts")
    for part in parts:
        if not _KEY_PART.fullmatch(part):
            raise TenantError(f"bad workspace key {_shown(key)}: bad part {_shown(part)}")
    return parts


def workspace_subdir(key: str | None) -> str:
    """Where the workspace `key` names lies below the worker's root ("" for the root)."""
    if key is None:
        return ""
    return "/".join((TENANTS_DIR, *workspace_parts(key), WORKSPACE_LEAF))


def run_workspace_key(tenant: str, workflow_id: str) -> str | None:
    """The workspace key Capstan gives the tenant's run with this workflow id (a thread's run,
    a delegated child `root/agent-STEP.INDEX`: its root's), for readers of its workspace."""
    root = workflow_id.split("/", 1)[0]
    scope = f"{THREAD_PREFIX}{tenant}:"
    if tenant != DEFAULT_TENANT and root.startswith(scope):
        return workspace_key(tenant, root.removeprefix(scope))
    return workspace_key(tenant)
