"""Worker Deployments: each run stays on the build that started it (`capstan deploy`).

With `CAPSTAN_DEPLOYMENT` set, a worker joins that Temporal Worker Deployment as the version
`<deployment>:<build id>` (`CAPSTAN_BUILD_ID`, default Capstan's hash of the run-deciding code)
and its runs are *pinned*: every workflow task of a run goes to workers of the version that
started it, so a new build never replays a parked run's history. A run moves to the current
version when it continues as new (`ContinueAsNewVersioningBehavior.AUTO_UPGRADE`), which Capstan
does before every wait for a person: a run parked on version 1 wakes on version 1, takes its
decision there, and its next execution starts on version 2, without a `workflow.patched()`.

Rollout: start the new build's workers (they register the version), `capstan deploy promote
BUILD` (optionally `--ramp PCT` first), then `capstan deploy drain BUILD` of the old one until it
says drained, and stop its workers. The first version of a deployment is made current by its
first worker, so a fresh deployment needs no command.

Shared by workers and clients: Temporal's API only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType, WorkerDeploymentVersionStatus
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from capstan.core.errors import ConfigError

__all__ = [
    "DeploymentError",
    "DeploymentView",
    "VersionView",
    "check_joins",
    "deployment_options",
    "describe_deployment",
    "drained",
    "make_current_if_first",
    "promote",
    "versioned",
]

_STATUS = {
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT: "current",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING: "ramping",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING: "draining",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED: "drained",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_INACTIVE: "inactive",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CREATED: "created",
}


class DeploymentError(ConfigError):
    """A deployment command that cannot be carried out; the message says why in one line.
    `retryable`: the deployment is not registered yet, or the server asks to slow down."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def deployment_options(deployment: str | None, build_id: str) -> dict[str, Any]:
    """The SDK worker options of a worker of `build_id`: a pinned version of `deployment`, or,
    with none, the bare build id (versioning off)."""
    if deployment is None:
        return {"build_id": build_id}
    version = WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id)
    config = WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )
    return {"deployment_config": config}


def versioned(config: Mapping[str, Any]) -> dict[str, Any]:
    """The build options of a worker beside the main one (webhook deliveries, model queues),
    as the main worker's `config`: the same deployment version, or the same build id."""
    if config.get("deployment_config") is not None:
        return {"deployment_config": config["deployment_config"]}
    return {"build_id": config.get("build_id")}


@dataclass(frozen=True)
class VersionView:
    build_id: str
    #: current, ramping, draining, drained, inactive or created
    status: str
    ramp_percentage: float = 0.0
    #: runs pinned to it that have not ended (from visibility)
    open_runs: int = 0
    #: workers polling the deployment's task queue with this build
    pollers: int = 0


@dataclass(frozen=True)
class DeploymentView:
    name: str
    current: str | None
    ramping: str | None
    versions: list[VersionView]


async def describe_deployment(client: Client, name: str, task_queue: str) -> DeploymentView:
    """The deployment's versions, which is current and ramping, each one's open runs and the
    workers polling `task_queue` with it. `DeploymentError` when there is no such deployment."""
    try:
        answer = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
        )
    except RPCError as exc:
        raise _refused(exc, f"deployment {name!r}") from None
    info = answer.worker_deployment_info
    routing = info.routing_config
    current = routing.current_deployment_version.build_id or None
    ramping = routing.ramping_deployment_version.build_id or None
    pollers = await _pollers_by_build(client, task_queue)
    versions = []
    for summary in info.version_summaries:
        build = summary.deployment_version.build_id
        versions.append(
            VersionView(
                build_id=build,
                status=_STATUS.get(summary.status, "unknown"),
                ramp_percentage=routing.ramping_version_percentage if build == ramping else 0.0,
                open_runs=await _open_runs(client, name, build),
                pollers=pollers.get(build, 0),
            )
        )
    versions.sort(key=lambda v: (v.status != "current", v.status != "ramping", v.build_id))
    return DeploymentView(name=name, current=current, ramping=ramping, versions=versions)


async def promote(
    client: Client, name: str, build_id: str, ramp: float | None = None, identity: str = ""
) -> None:
    """Make `build_id` the deployment's current version (new runs start on it, and runs that
    continue as new move to it), or with `ramp`, send that percentage of new runs to it."""
    view = await describe_deployment(client, name, "")
    if build_id not in {v.build_id for v in view.versions}:
        known = ", ".join(sorted(v.build_id for v in view.versions)) or "none"
        raise DeploymentError(
            f"deployment {name!r} has no build {build_id!r} (its builds: {known}); start a "
            "worker of that build first (CAPSTAN_DEPLOYMENT, CAPSTAN_BUILD_ID)"
        )
    try:
        if ramp is None:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=name,
                    build_id=build_id,
                    identity=identity,
                )
            )
        else:
            await client.workflow_service.set_worker_deployment_ramping_version(
                SetWorkerDeploymentRampingVersionRequest(
                    namespace=client.namespace,
                    deployment_name=name,
                    build_id=build_id,
                    percentage=ramp,
                    identity=identity,
                )
            )
    except RPCError as exc:
        raise _refused(exc, f"deployment {name!r} build {build_id!r}") from None


async def drained(client: Client, name: str, build_id: str, task_queue: str) -> VersionView:
    """`build_id`'s state, for `capstan deploy drain`: drained when no open run is pinned to
    it (its workers may stop). `DeploymentError` for the current version or an unknown one."""
    view = await describe_deployment(client, name, task_queue)
    version = next((v for v in view.versions if v.build_id == build_id), None)
    if version is None:
        raise DeploymentError(f"deployment {name!r} has no build {build_id!r}")
    if build_id in (view.current, view.ramping) or version.status in ("current", "ramping"):
        state = "current" if build_id == view.current else "ramping"
        raise DeploymentError(
            f"build {build_id!r} is the {state} version of {name!r}: promote another "
            "build before draining it"
        )
    return version


async def make_current_if_first(
    client: Client, name: str, build_id: str, identity: str, task_queue: str
) -> bool:
    """Make `build_id` current when the deployment has no current version yet (its first
    build: no command needed for a fresh deployment). True when it did. Not while workers
    without a deployment still poll `task_queue`: their open runs would move to this build
    (promote it with `capstan deploy promote` once they are gone)."""
    for _ in range(30):  # the version registers with the worker's first polls
        try:
            view = await describe_deployment(client, name, "")
            if view.current is not None:
                return False
            if (await _pollers_by_build(client, task_queue)).get("", 0):
                return False
            if build_id in {v.build_id for v in view.versions}:
                await promote(client, name, build_id, identity=identity)
                return True
        except DeploymentError as exc:
            if not exc.retryable:
                raise
        except RPCError as exc:
            if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                raise
        await asyncio.sleep(1.0)  # the server rate-limits a deployment's requests
    return False


async def check_joins(client: Client, task_queue: str, deployment: str | None) -> None:
    """A worker's deployment against its task queue's: a worker without one on a queue that a
    deployment serves would never get a task (`DeploymentError`, one line, at start)."""
    answer = await _workflow_queue(client, task_queue)
    if answer is None:
        return  # an older server: no deployments to be at odds with
    serving = answer.versioning_info.current_deployment_version.deployment_name
    if serving and deployment is None:
        raise DeploymentError(
            f"task queue {task_queue!r} is served by Worker Deployment {serving!r}: a worker "
            f"without one would get no task; set CAPSTAN_DEPLOYMENT={serving} "
            "(and CAPSTAN_BUILD_ID to this build's)"
        )
    if serving and deployment is not None and serving != deployment:
        raise DeploymentError(
            f"task queue {task_queue!r} is served by Worker Deployment {serving!r}, not "
            f"{deployment!r} (CAPSTAN_DEPLOYMENT)"
        )


async def _open_runs(client: Client, name: str, build_id: str) -> int:
    """Open runs pinned to the build (visibility; names and build ids hold no quote)."""
    query = f"TemporalWorkerDeploymentVersion = '{name}:{build_id}' AND ExecutionStatus = 'Running'"
    try:
        return (await client.count_workflows(query)).count
    except RPCError as exc:  # never "none" when unknown: a drain would stop the old workers
        raise DeploymentError(
            f"cannot count the runs pinned to {build_id!r}: {exc.message}"
        ) from None


async def _workflow_queue(client: Client, task_queue: str) -> DescribeTaskQueueResponse | None:
    """The server's description of `task_queue`'s workflow side (None: it gives none)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        return await client.workflow_service.describe_task_queue(request)
    except RPCError:
        return None


async def _pollers_by_build(client: Client, task_queue: str) -> dict[str, int]:
    answer = await _workflow_queue(client, task_queue) if task_queue else None
    if answer is None:
        return {}
    counts: dict[str, int] = {}  # "" counts the workers without a deployment
    for poller in answer.pollers:
        build = poller.deployment_options.build_id
        counts[build] = counts.get(build, 0) + 1
    return counts


def _refused(exc: RPCError, what: str) -> Exception:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return DeploymentError(
            f"{what}: not found (no worker of it has polled yet)", retryable=True
        )
    if exc.status == RPCStatusCode.PERMISSION_DENIED:
        return DeploymentError(f"{what}: not allowed ({exc.message})")
    if exc.status == RPCStatusCode.UNIMPLEMENTED:
        return DeploymentError(
            f"{what}: this Temporal server has no Worker Deployments ({exc.message}); they need "
            "Temporal server 1.28 or later"
        )
    if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return DeploymentError(
            f"{what}: the server is busy with it ({exc.message}); try again", retryable=True
        )
    if exc.status == RPCStatusCode.FAILED_PRECONDITION:
        return DeploymentError(f"{what}: {exc.message}")
    return exc
