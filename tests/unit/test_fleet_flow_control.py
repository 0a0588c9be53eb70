"""Fleet flow control (issue 30), without a server: the `[limits.NAME]` tables, the pushback a
worker writes after a 429, the priority and fairness fields of a run and who may ask for them,
the model queues, and `capstan limits` refusing a bad rate before it connects. The same on the
real dev server is `tests/integration/test_fleet_flow_control.py`."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import RateLimitSource
from temporalio.api.taskqueue.v1 import RateLimit
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
    UpdateTaskQueueConfigRequest,
)
from temporalio.client import Client
from temporalio.common import Priority

from capstan.activities.model_queues import Governor
from capstan.activities.providers.profiles import ProfileTable, model_chain
from capstan.cli.limits import _positive_rate
from capstan.client.priority import priority_of
from capstan.core import privilege
from capstan.core.errors import ConfigError
from capstan.core.models import ModelInfo, model_queue
from capstan.core.privilege import PrivilegeError
from capstan.core.spec import RunSpec
from capstan.runtime.provider_limits import ProviderLimits, limits_problem, load_limits
from capstan.runtime.queue_config import (
    PUSHBACK_FACTOR,
    PUSHBACK_FLOOR_RPS,
    Pushback,
    read_limit,
    write_rate,
)

ROOT = Path(__file__).resolve().parents[2]
#: a token with every scope but admin (the API's `alice`)
MEMBER = frozenset({"read", "steer", "approve"})
PROFILES = ["main", "backup"]


def limits_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return path


def refusal(path: Path, text: str) -> str:
    """The one-line `ConfigError` loading `text` as the profiles file gives."""
    with pytest.raises(ConfigError) as caught:
        load_limits(limits_file(path, text), PROFILES)
    message = str(caught.value)
    assert "\n" not in message
    return message


# [limits.NAME] -----------------------------------------------------------------------------


def test_a_valid_limits_file_loads(tmp_path: Path) -> None:
    path = limits_file(
        tmp_path,
        '[profiles.main]\nprovider = "openai"\nmodel = "gpt-x"\n\n'
        "[limits.main]\nrequests_per_second = 5\nconcurrency = 8\n\n"
        "[limits.default]\nrequests_per_second = 2.5\n\n"
        "[limits.backup]\n",
    )
    assert load_limits(path, PROFILES) == {
        "main": ProviderLimits(requests_per_second=5, concurrency=8),
        "default": ProviderLimits(requests_per_second=2.5),
        "backup": ProviderLimits(),
    }
    assert load_limits(path, PROFILES)["backup"].requests_per_second is None


def test_a_file_without_limits_tables_has_no_limits(tmp_path: Path) -> None:
    path = limits_file(tmp_path, '[profiles.main]\nprovider = "openai"\nmodel = "gpt-x"\n')
    assert load_limits(path, PROFILES) == {}


def test_no_profiles_file_has_no_limits() -> None:
    assert load_limits(None, PROFILES) == {}


def test_default_is_always_a_profile_that_may_have_limits(tmp_path: Path) -> None:
    path = limits_file(tmp_path, "[limits.default]\nconcurrency = 2\n")
    assert load_limits(path, []) == {"default": ProviderLimits(concurrency=2)}
    assert load_limits(path, PROFILES) == {"default": ProviderLimits(concurrency=2)}
    assert limits_problem("main", PROFILES) is None


def test_limits_for_an_unknown_profile_name_the_file_table_and_the_nearest(
    tmp_path: Path,
) -> None:
    message = refusal(tmp_path, "[limits.mian]\nrequests_per_second = 1\n")
    assert str(tmp_path / "profiles.toml") in message
    assert "[limits.mian]" in message
    assert "did you mean 'main'?" in message


def test_an_unknown_profile_with_nothing_near_has_no_guess() -> None:
    problem = limits_problem("zzzzzz", PROFILES)
    assert problem is not None
    assert "'zzzzzz'" in problem
    assert "did you mean" not in problem


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("requests_per_second = 0", "requests_per_second"),
        ("requests_per_second = -1", "requests_per_second"),
        ("requests_per_second = -0.5", "requests_per_second"),
        ("requests_per_second = 100001", "requests_per_second"),
        ("concurrency = 0", "concurrency"),
        ("concurrency = -3", "concurrency"),
        ('concurrency = "eight"', "concurrency"),
        ("rps = 3", "rps"),
    ],
)
def test_a_bad_limit_is_one_line_naming_the_table_and_field(
    tmp_path: Path, table: str, field: str
) -> None:
    message = refusal(tmp_path, f"[limits.main]\n{table}\n")
    assert str(tmp_path / "profiles.toml") in message
    assert f"[limits.main] {field}:" in message


def test_an_unknown_key_is_refused_not_ignored(tmp_path: Path) -> None:
    message = refusal(tmp_path, "[limits.main]\nrps = 3\n")
    assert "rps" in message
    assert "xtra" in message  # pydantic's "Extra inputs are not permitted"
    with pytest.raises(ValidationError):
        ProviderLimits.model_validate({"rps": 3})


def test_limits_that_are_not_a_table_are_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, "limits = 3\n")
    assert str(tmp_path / "profiles.toml") in message
    assert "`limits` is not a table" in message


def test_a_limit_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, "[limits]\nmain = 3\n")
    assert "[limits.main]" in message


def test_a_missing_profiles_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(ConfigError) as caught:
        load_limits(missing, PROFILES)
    message = str(caught.value)
    assert "\n" not in message
    assert str(missing) in message
    assert "cannot be read" in message


def test_an_invalid_toml_file_is_one_line(tmp_path: Path) -> None:
    message = refusal(tmp_path, "[limits.main\nrequests_per_second = \n")
    assert str(tmp_path / "profiles.toml") in message
    assert "not valid TOML" in message


# Pushback after a 429 ----------------------------------------------------------------------


@pytest.mark.parametrize("restore", [None, 2.5, 7.0, 0.25, 100_000.0])
def test_a_pushback_reason_reads_back(restore: float | None) -> None:
    pushback = Pushback(until=1_700_000_123.456, restore=restore)
    read = Pushback.parse(pushback.reason())
    assert read is not None
    assert read.until == pytest.approx(1_700_000_123.456)
    assert read.restore == restore
    assert read == pushback  # the default rate: nothing in the reason is lost


def test_a_pushback_back_to_the_workers_says_so() -> None:
    reason = Pushback(until=10.0, restore=None).reason()
    assert "restore=workers" in reason
    assert Pushback.parse(f"  {reason}\n") == Pushback(until=10.0, restore=None)


@pytest.mark.parametrize(
    "reason",
    [
        "",
        "capstan limits set",
        "capstan limits reset",
        "capstan: provider pushback",
        "capstan: provider pushback until=12.0",
        "capstan: provider pushback until=abc restore=2",
        "capstan: provider pushback until=12.0 restore=everyone",
        "capstan: provider pushback until=12.0 restore=2 and more",
        "someone else: provider pushback until=12.0 restore=2",
    ],
)
def test_other_reasons_are_no_pushback(reason: str) -> None:
    assert Pushback.parse(reason) is None


def test_a_pushback_restoring_a_tiny_rate_reads_back() -> None:
    pushback = Pushback(until=100.0, restore=0.00005)  # `capstan limits set --rps 0.00005`
    assert Pushback.parse(pushback.reason()) == pushback


def test_a_pushback_slows_to_a_share_of_the_rate() -> None:
    assert 0 < PUSHBACK_FACTOR < 1
    for rate in (10.0, 3.0, 100_000.0, 2 * PUSHBACK_FLOOR_RPS / PUSHBACK_FACTOR):
        assert Pushback.slowed(rate) == pytest.approx(rate * PUSHBACK_FACTOR)
        assert Pushback.slowed(rate) < rate


@pytest.mark.parametrize(
    ("rate", "slowed"),
    [
        (0.99 * PUSHBACK_FLOOR_RPS / PUSHBACK_FACTOR, PUSHBACK_FLOOR_RPS),  # a share: below it
        (PUSHBACK_FLOOR_RPS, PUSHBACK_FLOOR_RPS),
        (0.2, 0.2),  # already below the floor: never sped up, never slowed further
        (0.01, 0.01),
        (None, PUSHBACK_FLOOR_RPS),  # unlimited: the floor
    ],
)
def test_a_pushback_never_goes_below_the_floor(rate: float | None, slowed: float) -> None:
    assert Pushback.slowed(rate) == pytest.approx(slowed)


def test_a_pushback_never_speeds_a_queue_up() -> None:
    for rate in (0.01, 0.1, 0.49, 0.5, 0.51, 0.6, 0.99, 1.0, 1.01, 2.0, 50.0, 100_000.0):
        slowed = Pushback.slowed(rate)
        assert min(rate, PUSHBACK_FLOOR_RPS) <= slowed <= rate
        if rate > PUSHBACK_FLOOR_RPS:
            assert slowed < rate


# The queue's rate on the server, through a fake workflow service ---------------------------


@dataclass
class FakeService:
    """The two task queue calls of `queue_config`, answering one fixed description."""

    answer: DescribeTaskQueueResponse
    updates: list[UpdateTaskQueueConfigRequest] = field(default_factory=list)

    async def describe_task_queue(self, request: DescribeTaskQueueRequest) -> Any:
        return self.answer

    async def update_task_queue_config(self, request: UpdateTaskQueueConfigRequest) -> Any:
        self.updates.append(request)
        return None


@dataclass
class FakeClient:
    workflow_service: FakeService
    namespace: str = "default"


def described(
    configured: float | None, reason: str, effective: float, source: RateLimitSource.ValueType
) -> DescribeTaskQueueResponse:
    answer = DescribeTaskQueueResponse()
    answer.config.queue_rate_limit.metadata.reason = reason
    if configured is not None:
        answer.config.queue_rate_limit.rate_limit.CopyFrom(
            RateLimit(requests_per_second=configured)
        )
    answer.effective_rate_limit.requests_per_second = effective
    answer.effective_rate_limit.rate_limit_source = source
    return answer


def client_of(answer: DescribeTaskQueueResponse) -> tuple[Client, FakeService]:
    service = FakeService(answer)
    return cast(Client, FakeClient(service)), service


API = RateLimitSource.RATE_LIMIT_SOURCE_API
WORKER = RateLimitSource.RATE_LIMIT_SOURCE_WORKER


async def test_a_paused_queue_reads_as_paused_with_its_pause() -> None:
    pause = Pushback(until=500.0, restore=10.0, rate=5.0)
    client, _ = client_of(described(5.0, pause.reason(), 5.0, API))
    now = await read_limit(client, "q.model.main")
    assert (now.source, now.rate, now.override) == ("paused", 5.0, None)
    assert now.pushback is not None
    assert (now.pushback.until, now.pushback.restore) == (500.0, 10.0)


async def test_an_operators_rate_reads_as_an_override() -> None:
    client, _ = client_of(described(2.5, "capstan limits set", 2.5, API))
    now = await read_limit(client, "q.model.main")
    assert (now.source, now.rate, now.override, now.pushback) == ("operator", 2.5, 2.5, None)


async def test_the_workers_rate_reads_as_theirs() -> None:
    client, _ = client_of(described(None, "capstan limits reset", 4.0, WORKER))
    now = await read_limit(client, "q.model.main")
    assert (now.source, now.rate, now.override, now.pushback) == ("workers", 4.0, None, None)


async def test_a_paused_queue_reads_back_the_rate_it_was_slowed_to() -> None:
    pause = Pushback(until=500.0, restore=10.0, rate=5.0)
    client, _ = client_of(described(5.0, pause.reason(), 5.0, API))
    now = await read_limit(client, "q.model.main")
    assert now.pushback == pause


async def test_a_second_429_extends_a_pause_at_the_same_rate() -> None:
    pause = Pushback(until=1_000.5, restore=10.0, rate=5.0)
    client, service = client_of(described(5.0, pause.reason(), 5.0, API))
    governor = Governor(client, {"main": "q.model.main"}, clock=lambda: 1_000.0)
    governor.pushback("main", retry_after=0.2)
    for _ in range(100):
        if service.updates:
            break
        await asyncio.sleep(0)
    await governor.aclose()
    assert len(service.updates) == 1
    written = service.updates[0].update_queue_rate_limit
    assert Pushback.parse(written.reason) == Pushback(until=1_000.5, restore=10.0, rate=5.0)
    assert written.rate_limit.requests_per_second == pytest.approx(5.0)


async def test_writing_a_pause_an_override_and_a_reset() -> None:
    client, service = client_of(DescribeTaskQueueResponse())
    pause = Pushback(until=77.0, restore=None, rate=1.5)
    await write_rate(client, "q.model.main", pause)
    await write_rate(client, "q.model.main", 3.0)
    await write_rate(client, "q.model.main", None)
    first, second, third = (u.update_queue_rate_limit for u in service.updates)
    assert (first.rate_limit.requests_per_second, first.reason) == (1.5, pause.reason())
    assert (second.rate_limit.requests_per_second, second.reason) == (3.0, "capstan limits set")
    assert not third.HasField("rate_limit")  # no rate: back to what the workers declare
    assert third.reason == "capstan limits reset"
    assert {u.task_queue for u in service.updates} == {"q.model.main"}


# Priority and fairness: who may ask for what ------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        (RunSpec(task="t"), []),
        (RunSpec(task="t", priority=1), ["priority"]),
        (RunSpec(task="t", priority=2), ["priority"]),
        (RunSpec(task="t", priority=3), []),
        (RunSpec(task="t", priority=4), []),
        (RunSpec(task="t", priority=5), []),
        (RunSpec(task="t", fairness_weight=1.0), []),
        (RunSpec(task="t", fairness_weight=0.25), []),
        (RunSpec(task="t", fairness_weight=1.01), ["fairness_weight"]),
        (RunSpec(task="t", fairness_weight=100.0), ["fairness_weight"]),
        (RunSpec(task="t", fairness_key="someone-else"), []),
        (RunSpec(task="t", priority=1, fairness_weight=2.0), ["priority", "fairness_weight"]),
        (
            RunSpec(task="t", delegates={"helper": RunSpec(task="", priority=2)}),
            ["delegates.helper.priority"],
        ),
        (
            RunSpec(task="t", delegates={"helper": RunSpec(task="", fairness_weight=3.0)}),
            ["delegates.helper.fairness_weight"],
        ),
        (RunSpec(task="t", delegates={"helper": RunSpec(task="", priority=5)}), []),
    ],
)
def test_a_higher_priority_or_a_larger_share_needs_admin(spec: RunSpec, parts: list[str]) -> None:
    assert privilege.needs(spec) == [(part, privilege.ADMIN) for part in parts]
    assert privilege.refused(spec, MEMBER) == parts
    assert privilege.refused(spec, privilege.OPERATOR) == []


def test_nested_delegates_carry_the_whole_path() -> None:
    grandchild = RunSpec(task="", priority=1)
    spec = RunSpec(task="t", delegates={"a": RunSpec(task="", delegates={"b": grandchild})})
    assert privilege.refused(spec, MEMBER) == ["delegates.a.delegates.b.priority"]


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ((1, 5.0), (3, 1.0)),
        ((2, 0.5), (3, 0.5)),  # the weight was allowed: left alone
        ((5, 3.0), (5, 1.0)),  # the priority was allowed: left alone
        ((1, None), (3, None)),
        ((None, 1000.0), (None, 1.0)),
    ],
)
def test_an_inherited_spec_is_narrowed_to_the_default_priority_and_share(
    asked: tuple[int | None, float | None], kept: tuple[int | None, float | None]
) -> None:
    spec = RunSpec(task="t", priority=asked[0], fairness_weight=asked[1])
    narrowed = privilege.narrowed(spec, MEMBER)
    assert (narrowed.priority, narrowed.fairness_weight) == kept
    assert privilege.refused(narrowed, MEMBER) == []
    assert privilege.admit(spec, MEMBER, inherited=True) == narrowed
    assert privilege.narrowed(spec, privilege.OPERATOR) == spec


def test_allowed_priority_and_weight_are_not_narrowed() -> None:
    spec = RunSpec(task="t", priority=4, fairness_weight=0.5, fairness_key="k")
    assert privilege.narrowed(spec, MEMBER) == spec


def test_a_delegates_priority_is_narrowed_too() -> None:
    spec = RunSpec(
        task="t", delegates={"helper": RunSpec(task="", priority=1, fairness_weight=9.0)}
    )
    helper = privilege.narrowed(spec, MEMBER).delegates["helper"]
    assert (helper.priority, helper.fairness_weight) == (3, 1.0)


def test_a_member_asking_for_the_first_place_is_refused() -> None:
    spec = RunSpec(task="t", priority=1)
    with pytest.raises(PrivilegeError) as caught:
        privilege.admit(spec, MEMBER)
    assert caught.value.fields == ["priority"]
    assert "priority" in str(caught.value)
    with pytest.raises(PrivilegeError):
        privilege.admit(RunSpec(task="t", fairness_weight=2.0), frozenset())
    assert privilege.admit(spec, privilege.OPERATOR) is spec
    lower = RunSpec(task="t", priority=5, fairness_weight=0.5)
    assert privilege.admit(lower, MEMBER) is lower


def test_the_tenant_is_a_members_fairness_key_whatever_it_asks() -> None:
    asked = RunSpec(task="t", fairness_key="someone-else")
    assert privilege.fair_share(asked, "alice", MEMBER).fairness_key == "alice"
    assert privilege.fair_share(RunSpec(task="t"), "alice", MEMBER).fairness_key == "alice"
    assert privilege.fair_share(asked, "alice", []).fairness_key == "alice"


def test_an_admin_may_name_another_fairness_key() -> None:
    asked = RunSpec(task="t", fairness_key="batch-lane", priority=2)
    assert privilege.fair_share(asked, "root", privilege.OPERATOR) == asked
    unnamed = RunSpec(task="t", priority=2)
    shared = privilege.fair_share(unnamed, "root", privilege.OPERATOR)
    assert shared.fairness_key == "root"
    assert shared.model_copy(update={"fairness_key": None}) == unnamed  # nothing else changed


# The fields on RunSpec ---------------------------------------------------------------------


@pytest.mark.parametrize("priority", [1, 2, 3, 4, 5])
def test_a_priority_is_1_to_5(priority: int) -> None:
    assert RunSpec(task="t", priority=priority).priority == priority


@pytest.mark.parametrize("priority", [0, -1, 6, 100])
def test_a_priority_outside_1_to_5_is_refused(priority: int) -> None:
    with pytest.raises(ValidationError, match="priority"):
        RunSpec(task="t", priority=priority)


@pytest.mark.parametrize("key", ["a", "k" * 64, "é" * 32, "team-data"])
def test_a_fairness_key_of_up_to_64_bytes(key: str) -> None:
    assert RunSpec(task="t", fairness_key=key).fairness_key == key


@pytest.mark.parametrize("key", ["", "k" * 65, "é" * 40, "é" * 32 + "x"])
def test_a_fairness_key_longer_than_64_bytes_is_refused(key: str) -> None:
    with pytest.raises(ValidationError, match="fairness_key"):
        RunSpec(task="t", fairness_key=key)


def test_a_multibyte_fairness_key_is_counted_in_bytes() -> None:
    key = "é" * 40  # 40 characters, 80 bytes
    assert len(key) <= 64 < len(key.encode())
    with pytest.raises(ValidationError, match="64 bytes"):
        RunSpec(task="t", fairness_key=key)


@pytest.mark.parametrize("weight", [0.001, 0.5, 1.0, 1000.0])
def test_a_fairness_weight_from_0_001_to_1000(weight: float) -> None:
    assert RunSpec(task="t", fairness_weight=weight).fairness_weight == weight


@pytest.mark.parametrize("weight", [0.0, 0.0009, -1.0, 1000.5])
def test_a_fairness_weight_outside_the_range_is_refused(weight: float) -> None:
    with pytest.raises(ValidationError, match="fairness_weight"):
        RunSpec(task="t", fairness_weight=weight)


def test_a_runs_priority_is_temporals() -> None:
    spec = RunSpec(task="t", priority=4, fairness_key="tenant-a", fairness_weight=0.5)
    assert priority_of(spec) == Priority(
        priority_key=4, fairness_key="tenant-a", fairness_weight=0.5
    )
    unset = priority_of(RunSpec(task="t"))
    assert (unset.priority_key, unset.fairness_key, unset.fairness_weight) == (None, None, None)
    only = priority_of(RunSpec(task="t", priority=1))
    assert (only.priority_key, only.fairness_key, only.fairness_weight) == (1, None, None)


# Model queues ------------------------------------------------------------------------------


def test_a_profiles_model_queue_is_beside_the_runs() -> None:
    assert model_queue("capstan", "main") == "capstan.model.main"
    assert model_queue("team-a", "default") == "team-a.model.default"
    assert model_queue("a", "x") != model_queue("b", "x")


def test_a_model_has_no_queue_of_its_own_by_default() -> None:
    assert ModelInfo(profile="p", provider="openai", model="m").own_queue is False
    old = {
        "profile": "main",
        "provider": "openai",
        "model": "gpt-x",
        "context_window": 200_000,
        "max_output_tokens": 8_192,
        "prices": {"input": 3.0, "output": 15.0, "cache_read": 0.0, "cache_write": 0.0},
    }
    info = ModelInfo.model_validate(old)
    assert info.own_queue is False
    assert info.context_window == 200_000
    assert ModelInfo.model_validate({**old, "own_queue": True}).own_queue is True


TABLE = {
    "main": ProfileTable(provider="openai", model="gpt-x", fallback=["backup"]),
    "backup": ProfileTable(provider="anthropic", model="claude-x"),
}
ENV = {"CAPSTAN_MODEL": "main", "OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-b"}


@pytest.mark.parametrize(
    ("name", "limited", "own"),
    [
        ("main", (), [("main", False), ("backup", False)]),
        ("main", {"main"}, [("main", True), ("backup", False)]),
        ("main", {"backup"}, [("main", False), ("backup", True)]),
        ("main", {"main", "backup"}, [("main", True), ("backup", True)]),
        ("main", {"other"}, [("main", False), ("backup", False)]),
        ("default", {"default"}, [("default", True), ("backup", False)]),
        ("backup", {"main"}, [("backup", False)]),
    ],
)
def test_only_limited_profiles_have_a_queue_of_their_own(
    name: str, limited: set[str], own: list[tuple[str, bool]]
) -> None:
    chain = model_chain(name, ENV, TABLE, limited=limited)
    assert [(m.profile, m.own_queue) for m in chain.models] == own


# capstan limits ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0", "-1", "-0.5", "nan", "inf", "-inf", "abc", "", "100001"])
def test_a_bad_rate_argument_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        _positive_rate(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("text", "rate"), [("2.5", 2.5), ("1", 1.0), ("100000", 100_000.0)])
def test_a_positive_rate_argument_is_taken(text: str, rate: float) -> None:
    assert _positive_rate(text) == rate


def test_limits_set_refuses_a_zero_rate_before_it_connects(tmp_path: Path) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text("")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "TEMPORAL_CONFIG_FILE": str(config),
    }
    done = subprocess.run(
        [sys.executable, "-m", "capstan", "limits", "set", "main", "--rps", "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0] == done.stderr.strip().splitlines()[-1]
    assert "--rps" in errors[0]
    assert "127.0.0.1:1" not in done.stderr


# A fleet-wide concurrency cap, shared by the workers the server lists ----------------------


class _Slot:
    """What the SDK passes to a slot supplier (only `slot_info` is read)."""

    def __init__(self, used: bool) -> None:
        self.slot_info = object() if used else None


def test_a_workers_share_of_the_cap_follows_the_workers_polling() -> None:
    from capstan.activities.model_queues import FleetShare

    place = [(0, 1)]
    share = FleetShare(4, lambda: place[0])
    ctx: Any = None
    for _ in range(4):  # alone: the whole cap, one unused permit at a time
        assert share.try_reserve_slot(ctx) is not None
        assert share.try_reserve_slot(ctx) is None  # the first is still waiting for a task
        share.mark_slot_used(ctx)
    assert share.try_reserve_slot(ctx) is None  # 4 of 4 in use
    place[0] = (2, 3)  # two more workers joined, listed before this one: 4 // 3 = 1 each
    for _ in range(3):
        share.release_slot(_Slot(used=True))  # type: ignore[arg-type]
    assert share.held == 1 and share.try_reserve_slot(ctx) is None
    share.release_slot(_Slot(used=True))  # type: ignore[arg-type]
    assert share.try_reserve_slot(ctx) is not None
    share.release_slot(_Slot(used=False))  # type: ignore[arg-type]  # its poll ended empty
    assert (share.held, share.idle) == (0, 0)
    place[0] = (5, 9)  # more workers than the cap: each still takes one
    assert share.share() == 1


def test_the_shares_add_up_to_the_cap() -> None:
    """The remainder goes to the first workers in the server's list: 8 over 3 is 3, 3, 2."""
    from capstan.activities.model_queues import FleetShare

    for cap, workers in ((8, 3), (2, 2), (7, 7), (10, 4), (5, 1)):
        shares = [
            FleetShare(cap, lambda r=rank, n=workers: (r, n)).share() for rank in range(workers)
        ]
        assert sum(shares) == cap, (cap, workers, shares)
        assert max(shares) - min(shares) <= 1


def test_a_worker_not_yet_listed_counts_itself_last() -> None:
    from capstan.activities.model_queues import Governor

    client: Any = SimpleNamespace(identity="b@host")
    governor = Governor(client, {"main": "q.model.main"})
    assert governor.place("q.model.main") == (0, 1)  # before any read: alone
    governor._placed("q.model.main", ("a@host", "c@host"))
    assert governor.place("q.model.main") == (2, 3)
    governor._placed("q.model.main", ("a@host", "b@host", "c@host"))
    assert governor.place("q.model.main") == (1, 3)
