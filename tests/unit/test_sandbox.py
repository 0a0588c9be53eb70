"""The sandbox's pure parts and its refusals: the jail's command line and environment, how a
call's end is described, limits reaching the tool, and a worker with no jail offering no tool."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from pathlib import Path

import pytest

from capstan.activities.tool_runner import ToolActivities
from capstan.activities.tools.builtins import BUILTIN_TOOLS, builtin_tools
from capstan.activities.tools.jail import (
    WORKSPACE,
    Jail,
    JailUnavailable,
    NetworkLauncher,
    SandboxSettings,
    _jail_user,
    _masks,
)
from capstan.activities.tools.registry import ToolRegistry
from capstan.activities.tools.sandbox import JailRun, describe, reached, sandbox_tools
from capstan.core.activity_io import ListToolsInput
from capstan.core.policy import policy_for, rule_of_two_applies
from capstan.core.spec import SANDBOX_TOOLS, RunSpec, SandboxLimits, ToolRule
from capstan.core.tooling import ToolInfo
from capstan.host.sandbox import sandbox_jail
from capstan.host.user_code import build_registry
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.config import ConfigError, Settings
from tests import sample_tools
from tests.unit.scripted import Driver, call, catalog, reply

JAIL = Jail(
    bwrap="/usr/bin/bwrap",
    prlimit="/usr/bin/prlimit",
    shell="/usr/bin/bash",
    python="/usr/bin/python3",
    workspace=Path("/srv/ws"),
    flags=frozenset({"--disable-userns", "--size"}),
)


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_jail_command_line_shuts_everything_but_the_workspace() -> None:
    limits = SandboxLimits(memory_bytes=256 << 20, processes=16, cpu_seconds=7, file_bytes=999)
    argv = JAIL.argv(limits, 5, "python")
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--share-net" not in argv and "--disable-userns" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert pairs(argv, "--bind") == [("/srv/ws", WORKSPACE)]  # the only writable host path
    assert argv[argv.index("--chdir") + 1] == WORKSPACE
    host = {src for src, _ in [*pairs(argv, "--ro-bind"), *pairs(argv, "--ro-bind-try")]}
    assert "/usr" in host
    assert not {p for p in host if p.startswith(("/home", "/root", "/var", "/etc/shadow"))}
    assert {p for p in host if p.startswith("/etc/")} <= {
        "/etc/alternatives",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/locale.alias",
    }
    # the root is read-only once built; limits are set inside, right before the program
    assert argv.index("--remount-ro") < argv.index("/usr/bin/prlimit")
    tail = argv[argv.index("/usr/bin/prlimit") :]
    assert tail == [
        "/usr/bin/prlimit",
        f"--as={256 << 20}",
        "--cpu=7:8",
        "--nproc=16",
        "--fsize=999",
        "--core=0",
        "--",
        "/usr/bin/python3",
        "-s",
        "/sandbox/script",
    ]


def test_network_only_when_the_run_allows_it_and_never_the_hosts() -> None:
    # no network stack on this worker: the call runs without network (closed), never shared
    argv = JAIL.argv(SandboxLimits(network=True), 5, "shell")
    assert "--share-net" not in argv and argv == JAIL.argv(SandboxLimits(), 5, "shell")
    # with one: netjail.py (slirp4netns) in front of bwrap, which still unshares the network
    launcher = NetworkLauncher("/usr/bin/python3", "source", "/usr/bin/slirp4netns")
    networked = dataclasses.replace(JAIL, network=launcher)
    argv = networked.argv(SandboxLimits(network=True), 5, "shell")
    assert argv[:5] == ["/usr/bin/python3", "-I", "-S", "-c", "source"]
    assert "--share-net" not in argv and "--unshare-all" in argv
    assert ("/etc/hosts", "/etc/hosts") in pairs(argv, "--ro-bind-try")
    assert ("/etc/resolv.conf", "/etc/resolv.conf") not in pairs(argv, "--ro-bind-try")
    assert argv[-2:] == ["/usr/bin/bash", "/sandbox/script"]


def test_the_environment_is_an_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary")
    env = JAIL.environment("run/3/call_1")
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LANG", "USER", "CAPSTAN_IDEMPOTENCY_KEY"} | {
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
    }
    assert env["CAPSTAN_IDEMPOTENCY_KEY"] == "run/3/call_1"
    assert "sk-canary" not in env.values()


def test_worker_directories_inside_the_workspace_are_masked(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".capstan" / "blobs").mkdir(parents=True)
    (workspace / "codec.key").write_text("k")
    masks = _masks(workspace, [workspace / ".capstan", workspace / "codec.key"])
    assert masks == (
        "--tmpfs",
        f"{WORKSPACE}/.capstan",
        "--remount-ro",
        f"{WORKSPACE}/.capstan",
        "--ro-bind",
        "/dev/null",
        f"{WORKSPACE}/codec.key",
    )
    # the default layout (the workspace inside the data dir) needs no mask; the data dir itself
    # as the workspace is refused
    assert _masks(workspace, [tmp_path]) == ()
    refused = _masks(workspace, [workspace])
    assert isinstance(refused, JailUnavailable) and "data directory" in refused.reason


LIMITS = SandboxLimits(memory_bytes=64 << 20, processes=8, cpu_seconds=2, output_bytes=2048)


@pytest.mark.parametrize(
    ("run", "limit"),
    [
        (JailRun(None, b"", "wall_seconds"), "wall_seconds"),
        (JailRun(None, b"x" * 2048, "output_bytes", cut=True), "output_bytes"),
        (JailRun(128 + signal.SIGXCPU, b"", None), "cpu_seconds"),
        (JailRun(128 + signal.SIGXFSZ, b"", None), "file_bytes"),
        (JailRun(1, b"Traceback ...\nMemoryError\n", None), "memory_bytes"),
        (
            JailRun(1, b"BlockingIOError: [Errno 11] Resource temporarily unavailable", None),
            "processes",
        ),
        (JailRun(2, b"sh: 1: Cannot fork", None), "processes"),
        (JailRun(1, b"OSError: [Errno 27] File too large", None), "file_bytes"),
        # bash reports a killed command and goes on: the script may still exit 0
        (
            JailRun(0, b"/sandbox/script: line 3:   7 CPU time limit exceeded  yes\n", None),
            "cpu_seconds",
        ),
        (
            JailRun(0, b"/sandbox/script: line 1:  3 File size limit exceeded head\n", None),
            "file_bytes",
        ),
        (JailRun(0, b"grep found: out of memory\n", None), None),  # success: just output
        (JailRun(1, b"No such file or directory", None), None),
    ],
)
def test_which_limit_a_call_reached(run: JailRun, limit: str | None) -> None:
    assert reached(run) == limit
    text = describe(run, LIMITS, 3.0)
    if limit is None:
        assert "limit reached" not in text
    else:
        assert f"limit reached: {limit} (" in text.splitlines()[1]


def test_the_observation_leads_with_status_then_output() -> None:
    text = describe(JailRun(0, b"8\n", None), LIMITS, 3.0)
    assert text == "exit status: 0\n--- output (2 bytes) ---\n8\n"
    killed = describe(JailRun(None, b"", "wall_seconds"), LIMITS, 3.0).splitlines()
    assert killed[:2] == [
        "exit status: none (killed by the sandbox)",
        "limit reached: wall_seconds (wall time: killed after 3 s)",
    ]
    assert describe(JailRun(137, b"", None), LIMITS, 3).startswith(
        "exit status: 137 (killed by SIGKILL)"
    )


def test_limits_are_in_the_run_spec_with_safe_defaults() -> None:
    limits = RunSpec(task="t").sandbox
    assert limits == SandboxLimits()
    assert not limits.network and limits.retryable
    assert limits.wall_seconds <= 60 and limits.memory_bytes <= 1 << 30 and limits.processes <= 64
    # old specs (no `sandbox` field) still decode
    assert RunSpec.model_validate({"task": "t"}).sandbox == limits


def test_only_sandbox_calls_carry_the_limits() -> None:
    shell = ToolInfo(read_only=False, untrusted_output=True)
    tools = catalog(("finish", "read_file", "run_shell"), run_shell=shell)
    both = reply("", call("run_shell", "c1", command="ls"), call("read_file", "c2", path="x"))
    driver = Driver([both, reply("", call("finish", answer="ok"))], catalog=tools)
    spec = RunSpec(task="t", sandbox=SandboxLimits(processes=9), auto_approve=True)
    driver.run(spec)
    carried = {c.name: c.sandbox for c in driver.tool_inputs[0].calls}
    assert carried == {"run_shell": SandboxLimits(processes=9), "read_file": None}
    assert set(SANDBOX_TOOLS) == {"run_shell", "run_python"}


def test_the_tools_are_state_changing_untrusted_and_ask_by_default() -> None:
    registry = ToolRegistry(sandbox_tools(JAIL))
    for name in SANDBOX_TOOLS:
        spec = registry.get(name).spec()  # type: ignore[union-attr]
        assert not spec.read_only and spec.untrusted_output and not spec.sensitive
        assert set(spec.parameters["properties"]) <= {"command", "code", "timeout"}
        assert "idempotent" in spec.description
    no_python = dataclasses.replace(JAIL, python=None)
    assert [t.__name__ for t in sandbox_tools(no_python)] == ["run_shell"]


def test_no_jail_no_tools_and_the_worker_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    caplog.set_level(logging.WARNING, logger="capstan.worker")
    jail = sandbox_jail(settings, {"CAPSTAN_BWRAP": str(tmp_path / "no-bwrap")})
    assert jail is None
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "run_shell and run_python are not offered: bubblewrap not found "
        f"(CAPSTAN_BWRAP={tmp_path / 'no-bwrap'}); install it (Debian package `bubblewrap`)"
    ]
    names = {s.name for s in build_registry(None, jail).specs()}
    assert not names & set(SANDBOX_TOOLS) and {"read_file", "write_file"} <= names
    assert builtin_tools(None) == BUILTIN_TOOLS


def test_a_root_worker_jails_as_another_uid_and_only_root_may_choose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    refused = _jail_user(SandboxSettings(uid=2000))
    assert isinstance(refused, JailUnavailable) and "root" in refused.reason
    assert _jail_user(SandboxSettings()) is None  # as the worker's own uid
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _jail_user(SandboxSettings()) == (65534, 65534)
    assert _jail_user(SandboxSettings(uid=4321)) == (4321, 4321)  # no such user: gid = uid


def test_sandbox_settings_are_read_from_the_worker_environment() -> None:
    assert SandboxSettings.from_env({}).bwrap == "bwrap"
    assert SandboxSettings.from_env({"CAPSTAN_SANDBOX_UID": "1234"}).uid == 1234
    with pytest.raises(ConfigError, match="CAPSTAN_SANDBOX_UID"):
        SandboxSettings.from_env({"CAPSTAN_SANDBOX_UID": "root"})


async def test_ask_by_default_a_worker_policy_may_allow_and_the_rule_of_two_still_asks(
    tmp_path: Path,
) -> None:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    registry = ToolRegistry([*sandbox_tools(JAIL), sample_tools.read_secrets])
    spec = RunSpec(task="t")

    async def decision(policy: dict[str, ToolRule], allowed: tuple[str, ...]) -> str:
        tools = ToolActivities(registry, content, tmp_path / "ws", policy)
        found = await tools.list_tools(ListToolsInput(allowed=allowed))
        rule_of_two = rule_of_two_applies(found, spec)
        return policy_for("run_shell", found.tools["run_shell"], spec, rule_of_two)[0]

    assert await decision({}, ("run_shell",)) == "ask"
    allow = {"run_shell": ToolRule(decision="allow")}
    assert await decision(allow, ("run_shell",)) == "allow"
    # untrusted output + sensitive data + state change in one run: asks whatever the policy
    assert await decision(allow, ("run_shell", "read_secrets")) == "ask"
