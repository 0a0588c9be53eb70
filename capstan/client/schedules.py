"""Schedules: a run that starts on a calendar or an interval, on Temporal Schedules.

Each scheduled run is an ordinary `AgentWorkflow` run (auditable, steerable) whose workflow id
names the schedule, `schedule-<name>-<time>` (Temporal appends the scheduled time). Whether a
run starts while the previous one still runs (say, waiting for an approval) is the schedule's
overlap policy: `skip` by default. Temporal keeps the schedule, so nothing here holds state, and
a schedule goes on firing with no client connected.

Example::

    schedules = Schedules(await CapstanClient.connect())
    await schedules.create("nightly", RunSpec(task="Summarise the logs"), When(cron="0 2 * * *"))
    print((await schedules.describe("nightly")).next_runs)
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, model_validator
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from capstan.client.priority import priority_of
from capstan.client.runs import CapstanClient, CapstanError
from capstan.core import privilege
from capstan.core.spec import RunSpec
from capstan.core.workflow_io import TERMINAL_MEMO, WORKFLOW_NAME, StartInput

__all__ = [
    "OVERLAP",
    "ScheduleError",
    "ScheduleNotFoundError",
    "ScheduleSummary",
    "ScheduledRun",
    "Schedules",
    "When",
    "parse_duration",
]

Overlap = Literal[
    "skip", "buffer-one", "buffer-all", "allow-all", "cancel-other", "terminate-other"
]

#: the overlap policies by their CLI names
OVERLAP: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer-one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer-all": ScheduleOverlapPolicy.BUFFER_ALL,
    "allow-all": ScheduleOverlapPolicy.ALLOW_ALL,
    "cancel-other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate-other": ScheduleOverlapPolicy.TERMINATE_OTHER,
}
_NAMES = {policy: name for name, policy in OVERLAP.items()}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT = {"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
RUN_PREFIX = "schedule-"
#: schedule memo key: the timing as given (the server turns a cron into calendar entries)
TIMING_MEMO = "capstan_timing"
_HandleCall = Callable[[ScheduleHandle], Awaitable[None]]


class ScheduleError(CapstanError):
    """A schedule call that could not be made, in one line (bad cron, bad name, ...)."""


class ScheduleNotFoundError(ScheduleError):
    """No schedule has this name."""


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `1h`, `1h30m`, `2d` as a timedelta; ScheduleError otherwise."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ScheduleError(f"bad duration {text!r}: use e.g. 90s, 15m, 1h, 1h30m, 2d")
    return timedelta(seconds=sum(float(n) * _UNIT[u] for n, u in parts))


class When(BaseModel):
    """When a schedule fires and what it does about overlaps and missed times."""

    cron: str | None = None
    every: timedelta | None = None
    overlap: Overlap = "skip"
    #: how late a missed time (server down) may still be run; None: Temporal's default (1 year)
    catchup: timedelta | None = None
    jitter: timedelta | None = None
    time_zone: str | None = None
    paused: bool = False
    note: str = Field(default="", max_length=1_000)

    @model_validator(mode="after")
    def _one_timing(self) -> When:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give exactly one of cron and every")
        if self.every is not None and self.every < timedelta(seconds=1):
            raise ValueError("every: at least 1s")
        if self.time_zone is not None:
            try:
                ZoneInfo(self.time_zone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {self.time_zone!r}") from None
        return self

    def spec(self) -> ScheduleSpec:
        return ScheduleSpec(
            cron_expressions=[self.cron] if self.cron else [],
            intervals=[ScheduleIntervalSpec(every=self.every)] if self.every else [],
            jitter=self.jitter,
            time_zone_name=self.time_zone,
        )


class ScheduledRun(BaseModel):
    """One run a schedule started, with how it ended (None while it runs)."""

    run_id: str
    scheduled_at: str
    started_at: str
    status: str
    terminal_reason: str | None = None


class ScheduleSummary(BaseModel):
    """What `ls` and `describe` show of a schedule."""

    name: str
    paused: bool
    timing: str
    note: str = ""
    next_runs: list[str] = []
    recent: list[ScheduledRun] = []
    overlap: str | None = None
    catchup_seconds: float | None = None
    jitter_seconds: float | None = None
    time_zone: str | None = None
    agent: str | None = None
    task: str | None = None
    runs_started: int = 0
    skipped_overlap: int = 0
    missed_catchup: int = 0
    running: list[str] = []


def _timing(spec: ScheduleSpec) -> str:
    parts = [f"cron {c!r}" for c in spec.cron_expressions]
    parts += [f"every {i.every}" for i in spec.intervals]
    if spec.calendars and not spec.cron_expressions:  # the server turns cron into calendars
        parts.append(f"{len(spec.calendars)} calendar entries")
    return ", ".join(parts) or "no times (trigger only)"


def _iso(value: object) -> str:
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else str(value)


class Schedules:
    """Create, list, describe, pause, unpause, trigger and delete schedules of runs."""

    def __init__(self, capstan: CapstanClient) -> None:
        self.capstan = capstan

    async def create(self, name: str, spec: RunSpec, when: When) -> str:
        """Create schedule `name` starting runs of `spec`; ScheduleError when the server
        refuses it (a bad cron expression, a taken name)."""
        _check_name(name)
        if spec.thread is not None:
            raise ScheduleError(f"schedule {name!r}: a scheduled run cannot be a thread run")
        # the caller reaches Temporal itself: the operator (capstan.core.privilege)
        spec = privilege.admit(spec.model_copy(update={"run_id": None}), privilege.OPERATOR)
        action = ScheduleActionStartWorkflow(
            WORKFLOW_NAME,
            StartInput(spec=spec),
            id=RUN_PREFIX + name,
            task_queue=self.capstan.settings.task_queue,
            priority=priority_of(spec),
        )
        policy = SchedulePolicy(overlap=OVERLAP[when.overlap], catchup_window=when.catchup)
        state = ScheduleState(note=when.note or None, paused=when.paused)
        schedule = Schedule(action=action, spec=when.spec(), policy=policy, state=state)
        try:
            memo = {TIMING_MEMO: _timing(schedule.spec)}
            await self.capstan.client.create_schedule(name, schedule, memo=memo)
        except RPCError as exc:
            raise _refused(name, exc) from None
        except ValueError as exc:  # the SDK checks some fields itself
            raise ScheduleError(f"schedule {name!r}: {exc}") from None
        return name

    async def describe(self, name: str, recent: int = 10) -> ScheduleSummary:
        """The schedule, its next times and its recent runs with how each ended."""
        desc = await self._describe(name)
        sched, info = desc.schedule, desc.info
        summary = self._summary(name, sched, await self._spec_of(sched))
        timing = (await desc.memo()).get(TIMING_MEMO)
        if isinstance(timing, str):
            summary = summary.model_copy(update={"timing": timing})
        runs = [await self._scheduled_run(r) for r in info.recent_actions[-recent:]]
        running = [
            r.workflow_id
            for r in info.running_actions
            if isinstance(r, ScheduleActionExecutionStartWorkflow)
        ]
        return summary.model_copy(
            update={
                "next_runs": [_iso(t) for t in info.next_action_times],
                "recent": runs,
                "runs_started": info.num_actions,
                "skipped_overlap": info.num_actions_skipped_overlap,
                "missed_catchup": info.num_actions_missed_catchup_window,
                "running": running,
            }
        )

    async def list_schedules(self) -> list[ScheduleSummary]:
        """Every schedule that starts Capstan runs (as visibility has them: a schedule
        created a moment ago may be missing for a second)."""
        found: list[ScheduleSummary] = []
        async for entry in await self.capstan.client.list_schedules():
            listed = entry.schedule
            if listed is None or not isinstance(listed.action, ScheduleListActionStartWorkflow):
                continue
            if listed.action.workflow != WORKFLOW_NAME:
                continue
            info = entry.info
            timing = (await entry.memo()).get(TIMING_MEMO)
            found.append(
                ScheduleSummary(
                    name=entry.id,
                    paused=listed.state.paused,
                    timing=timing if isinstance(timing, str) else _timing(listed.spec),
                    note=listed.state.note or "",
                    next_runs=[_iso(t) for t in info.next_action_times] if info else [],
                )
            )
        return sorted(found, key=lambda s: s.name)

    async def pause(self, name: str, note: str = "") -> None:
        await self._call(name, lambda h: h.pause(note=note or "paused with capstan"))

    async def unpause(self, name: str, note: str = "") -> None:
        await self._call(name, lambda h: h.unpause(note=note or "unpaused with capstan"))

    async def trigger(self, name: str, overlap: Overlap | None = None) -> None:
        """Start a run now, under the schedule's overlap policy unless `overlap` says."""
        policy = OVERLAP[overlap] if overlap else None
        await self._call(name, lambda h: h.trigger(overlap=policy))

    async def delete(self, name: str) -> None:
        """Delete the schedule; the runs it started go on."""
        await self._call(name, lambda h: h.delete())

    # ---------------------------------------------------------------------------------------

    async def _spec_of(self, sched: Schedule) -> RunSpec | None:
        """The spec the schedule's runs start with (described actions carry payloads)."""
        action = sched.action
        if not isinstance(action, ScheduleActionStartWorkflow) or not action.args:
            return None
        raw = action.args[0]
        if isinstance(raw, StartInput):
            return raw.spec
        if not isinstance(raw, Payload):
            return None
        converter = self.capstan.client.data_converter
        (decoded,) = await converter.decode([raw], [StartInput])
        return decoded.spec if isinstance(decoded, StartInput) else None

    def _summary(self, name: str, sched: Schedule, spec: RunSpec | None) -> ScheduleSummary:
        policy = sched.policy
        return ScheduleSummary(
            name=name,
            paused=sched.state.paused,
            timing=_timing(sched.spec),
            note=sched.state.note or "",
            overlap=_NAMES.get(policy.overlap, str(policy.overlap)),
            catchup_seconds=policy.catchup_window.total_seconds()
            if policy.catchup_window
            else None,
            jitter_seconds=sched.spec.jitter.total_seconds() if sched.spec.jitter else None,
            time_zone=sched.spec.time_zone_name,
            agent=spec.agent if spec else None,
            task=spec.task if spec else None,
        )

    async def _scheduled_run(self, result: ScheduleActionResult) -> ScheduledRun:
        action = result.action
        run_id = (
            action.workflow_id if isinstance(action, ScheduleActionExecutionStartWorkflow) else ""
        )
        status, reason = "unknown", None
        if run_id:
            try:
                desc = await self.capstan.describe(run_id)
            except CapstanError:
                desc = None
            if desc is not None:
                status = desc.status.name.lower() if desc.status else "unknown"
                if desc.status == WorkflowExecutionStatus.COMPLETED:
                    memo = await desc.memo()
                    value = memo.get(TERMINAL_MEMO)
                    reason = value if isinstance(value, str) else None
        return ScheduledRun(
            run_id=run_id,
            scheduled_at=_iso(result.scheduled_at),
            started_at=_iso(result.started_at),
            status=status,
            terminal_reason=reason,
        )

    async def _describe(self, name: str) -> ScheduleDescription:
        handle = self.capstan.client.get_schedule_handle(name)
        try:
            return await handle.describe()
        except RPCError as exc:
            raise _refused(name, exc) from None

    async def _call(self, name: str, call: _HandleCall) -> None:
        _check_name(name)
        handle = self.capstan.client.get_schedule_handle(name)
        try:
            await call(handle)
        except RPCError as exc:
            raise _refused(name, exc) from None


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ScheduleError(
            f"bad schedule name {name!r}: letters, digits, '.', '_' and '-' (at most 100)"
        )


def _refused(name: str, exc: RPCError) -> ScheduleError:
    """The server's refusal as one line."""
    if exc.status == RPCStatusCode.NOT_FOUND:
        return ScheduleNotFoundError(f"no schedule {name!r}")
    if exc.status == RPCStatusCode.ALREADY_EXISTS:
        return ScheduleError(f"schedule {name!r} exists already (delete it first)")
    return ScheduleError(f"schedule {name!r}: {exc.message}")
