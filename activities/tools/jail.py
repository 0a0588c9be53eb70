"""The bubblewrap jail that `run_shell` and `run_python` run in: its settings, probe and argv.

The jail of one call (the threat model is in the README, "Running code"):

- fresh user, mount, PID, IPC, UTS, cgroup and network namespaces: a jail never shares the
  host's network. Without `sandbox.network` it has a loopback of its own and nothing else; with
  it, `netjail.py` attaches slirp4netns and shuts every route to the host, its loopback and
  interfaces, private and link-local ranges (so the Temporal server, the blob store and cloud
  metadata are out of reach) before the program starts. A worker without slirp4netns (or whose
  probe of it fails) runs such calls without network, and says so at start;
- a read-only view of `/usr` (with the `/bin`, `/lib*` links), a few files of `/etc` that
  programs need to start, a private `/proc` (it shows the jail's processes only) and a minimal
  `/dev`; the workspace read-write at `/workspace` (the working directory), size-capped tmpfs at
  `/tmp` and `/dev/shm`; everything else read-only or absent (no `/home`, `/root`, `/var`, no
  data directory or blob store; worker directories inside the workspace are masked);
- no capabilities, no new privileges, no nested user namespaces (where bwrap supports it); the
  jail is killed when the worker dies (`--die-with-parent`) and has its own session;
- a clean environment from an allow-list; resource limits set by `prlimit` *inside* the jail,
  after the namespaces exist, so the process limit counts this call's processes only.

Linux never applies the process limit to root, so a worker running as root runs the jail as an
unprivileged uid (`CAPSTAN_SANDBOX_UID`, default 65534): the workspace must then be reachable
and, for writes, writable by that uid.

Must never run anything unjailed: a jail that cannot be built is `JailUnavailable` with the
reason, and its tools are not offered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from pydantic import Field, field_validator

from capstan.core.spec import SandboxLimits
from capstan.runtime.environment import EnvSettings

__all__ = [
    "NOBODY",
    "SCRIPT_PATH",
    "WORKSPACE",
    "Jail",
    "JailUnavailable",
    "NetworkLauncher",
    "Program",
    "SandboxSettings",
    "probe_jail",
    "script_fd",
    "spawn_identity",
]

WORKSPACE = "/workspace"
SCRIPT_PATH = "/sandbox/script"
NOBODY = 65534
Program = Literal["shell", "python"]

#: `/etc` entries programs need to start (dynamic linker, alternatives, time zone, locale).
_ETC = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "locale.alias")
#: ... and to reach the network, when the run allows it (`netjail.py` binds its own resolv.conf).
_ETC_NETWORK = (
    "hosts",
    "nsswitch.conf",
    "gai.conf",
    "host.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
)
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_OPTIONAL_FLAGS = ("--disable-userns", "--size")
_PROBE_SCRIPT = "command -v python3 || echo; if [ -w . ]; then echo rw; else echo ro; fi\n"
#: a network jail's probe: its namespace has slirp's tap0 (the launcher fails closed otherwise)
_NETWORK_PROBE = 'while read -r l; do case "$l" in tap0:*) echo tap0;; esac; done </proc/net/dev\n'
_LAUNCHER = Path(__file__).with_name("netjail.py")


class SandboxSettings(EnvSettings):
    """Where bubblewrap is and which uid a root worker runs the jail as."""

    bwrap: str = Field("bwrap", validation_alias="CAPSTAN_BWRAP", min_length=1)
    uid: int | None = Field(None, validation_alias="CAPSTAN_SANDBOX_UID", ge=1)
    slirp4netns: str = Field("slirp4netns", validation_alias="CAPSTAN_SLIRP4NETNS", min_length=1)
    #: more IPv4 ranges a network jail may not reach (comma-separated CIDRs), e.g. a Temporal
    #: cluster or an S3 endpoint on a public address; private and link-local ranges always are
    network_deny: str = Field("", validation_alias="CAPSTAN_SANDBOX_NETWORK_DENY")

    @field_validator("network_deny")
    @classmethod
    def _cidrs(cls, value: str) -> str:
        items = [item.strip() for item in value.split(",") if item.strip()]
        return ",".join(str(ipaddress.IPv4Network(item, strict=False)) for item in items)


@dataclass(frozen=True)
class JailUnavailable:
    """Why this worker cannot jail code (the sandbox tools are then not offered)."""

    reason: str


@dataclass(frozen=True)
class NetworkLauncher:
    """How this worker gives a jail a network of its own: `netjail.py` run by `python`."""

    python: str
    source: str = dataclasses.field(repr=False)
    slirp4netns: str
    deny: tuple[str, ...] = ()

    def argv(self, user: tuple[int, int] | None) -> list[str]:
        args = [self.python, "-I", "-S", "-c", self.source, "--slirp", self.slirp4netns]
        for net in self.deny:
            args += ["--deny", net]
        if user is not None:
            args += ["--as", f"{user[0]}:{user[1]}"]
        return [*args, "--"]


@dataclass(frozen=True)
class Jail:
    """A jail this worker has shown it can build, and how to build it for one call."""

    bwrap: str
    prlimit: str
    shell: str
    python: str | None
    workspace: Path
    #: run bwrap as this uid/gid (a worker running as root), or None: as the worker
    user: tuple[int, int] | None = None
    #: bwrap arguments masking worker directories or files that lie inside the workspace
    masks: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    #: the jail's uid may write the workspace (a root worker's jail may only read it)
    writable: bool = True
    #: how a run's `sandbox.network` is given, or None: such calls run without network
    network: NetworkLauncher | None = None
    #: why network jails are unavailable (said at start), when `network` is None
    network_unavailable: str | None = None

    def argv(self, limits: SandboxLimits, fd: int, program: Program) -> list[str]:
        """The command line of one call whose script is readable from descriptor `fd`."""
        command = [self.shell] if program == "shell" else [self.python or "python3", "-s"]
        launcher = self.network.argv(self.user) if self.network and limits.network else []
        return [
            *launcher,
            self.bwrap,
            *self._namespaces(),
            *self._system_view(limits),
            *["--bind", str(self.workspace), WORKSPACE, *self.masks, "--chdir", WORKSPACE],
            *["--ro-bind-data", str(fd), SCRIPT_PATH, "--remount-ro", "/"],
            *self._rlimits(limits),
            *command,
            SCRIPT_PATH,
        ]

    def environment(self, idempotency_key: str) -> dict[str, str]:
        """The whole environment of the jail: nothing of the worker's reaches it."""
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "USER": "sandbox",
            # modules in the workspace import as from a script's own directory; prints and
            # tracebacks arrive in order (one pipe) and are not lost when a limit kills python
            "PYTHONPATH": WORKSPACE,
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "CAPSTAN_IDEMPOTENCY_KEY": idempotency_key,
        }

    def networked(self, limits: SandboxLimits) -> bool:
        """Whether a call with `limits` gets a network (its own, through `netjail.py`)."""
        return limits.network and self.network is not None

    def _namespaces(self) -> list[str]:
        # never --share-net: a network jail gets slirp4netns in a namespace of its own
        args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"]
        args += ["--cap-drop", "ALL", "--hostname", "sandbox"]
        if "--disable-userns" in self.flags:
            args.append("--disable-userns")
        return args

    def _system_view(self, limits: SandboxLimits) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for name in _TOP_LINKS:
            host = Path("/", name)
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        for name in (*_ETC, *(_ETC_NETWORK if self.networked(limits) else ())):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += [*self._sized(limits.tmp_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        args += [*self._sized(limits.tmp_bytes), "--tmpfs", "/tmp"]
        return [*args, "--dir", "/var", "--symlink", "../tmp", "/var/tmp"]

    def _sized(self, size: int) -> list[str]:
        return ["--size", str(size)] if "--size" in self.flags else []

    def _rlimits(self, limits: SandboxLimits) -> list[str]:
        cpu = limits.cpu_seconds
        return [
            self.prlimit,
            f"--as={limits.memory_bytes}",
            f"--cpu={cpu}:{cpu + 1}",  # SIGXCPU at the limit, SIGKILL a second later
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_bytes}",
            "--core=0",
            "--",
        ]


@contextlib.contextmanager
def script_fd(text: str) -> Iterator[int]:
    """An anonymous in-memory file holding `text`, for bwrap to copy into the jail."""
    fd = os.memfd_create("capstan-script", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode("utf-8", "surrogateescape"))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def probe_jail(
    settings: SandboxSettings, workspace: Path, hidden: Sequence[Path] = ()
) -> Jail | JailUnavailable:
    """Build the jail once, for real, and run a probe in it (which python3?); or say why not.
    Then the same for a jail with network (`Jail.network`, or `network_unavailable`: why not)."""
    found = _locate(settings, workspace, hidden)
    if isinstance(found, JailUnavailable):
        return found
    done = _run_probe(found, SandboxLimits(wall_seconds=10), _PROBE_SCRIPT)
    if isinstance(done, _Failure):
        return JailUnavailable(done)
    python, access = ([*done.splitlines(), "", ""])[:2]
    jail = dataclasses.replace(found, python=python or None, writable=access == "rw")
    launcher = _launcher(settings)
    if isinstance(launcher, str):
        return dataclasses.replace(jail, network_unavailable=launcher)
    networked = dataclasses.replace(jail, network=launcher)
    seen = _run_probe(networked, SandboxLimits(wall_seconds=10, network=True), _NETWORK_PROBE)
    if isinstance(seen, _Failure) or "tap0" not in seen:
        why = seen if isinstance(seen, _Failure) else "the jail has no tap0"
        return dataclasses.replace(jail, network_unavailable=f"slirp4netns: {why}")
    return networked


def _run_probe(jail: Jail, limits: SandboxLimits, script: str) -> str:
    """The probe script's output, or why it failed (a `str` subclass marks the failure)."""
    with script_fd(script) as fd:
        try:
            done = subprocess.run(
                jail.argv(limits, fd, "shell"),
                env=jail.environment("probe"),
                pass_fds=(fd,),
                capture_output=True,
                timeout=limits.wall_seconds,
                check=False,
                start_new_session=True,
                **spawn_identity(jail, limits),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return _Failure(f"bubblewrap could not be started: {exc}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        who = f" as uid {jail.user[0]} (CAPSTAN_SANDBOX_UID)" if jail.user else ""
        return _Failure(f"bubblewrap failed{who}: {said[-1] if said else done.returncode}")
    return done.stdout.decode(errors="replace")


class _Failure(str):
    """A probe's failure, told apart from its output."""


def _launcher(settings: SandboxSettings) -> NetworkLauncher | str:
    slirp = shutil.which(settings.slirp4netns)
    if slirp is None:
        return (
            f"slirp4netns not found (CAPSTAN_SLIRP4NETNS={settings.slirp4netns}); "
            "install it (Debian package `slirp4netns`)"
        )
    try:
        source = _LAUNCHER.read_text(encoding="utf-8")
    except OSError as exc:
        return f"the network jail's launcher is missing: {exc}"
    deny = tuple(net for net in settings.network_deny.split(",") if net)
    return NetworkLauncher(sys.executable, source, slirp, deny)


class Identity(TypedDict, total=False):
    user: int
    group: int
    extra_groups: list[int]


def spawn_identity(jail: Jail, limits: SandboxLimits | None = None) -> Identity:
    """`subprocess` options that start bwrap as the jail's uid (only a root worker has one).
    A call with network starts `netjail.py` as the worker instead, which starts bwrap so."""
    if jail.user is None or (limits is not None and jail.networked(limits)):
        return {}
    uid, gid = jail.user
    return {"user": uid, "group": gid, "extra_groups": []}


def _locate(
    settings: SandboxSettings, workspace: Path, hidden: Sequence[Path]
) -> Jail | JailUnavailable:
    bwrap = shutil.which(settings.bwrap)
    if bwrap is None:
        return JailUnavailable(
            f"bubblewrap not found (CAPSTAN_BWRAP={settings.bwrap}); "
            "install it (Debian package `bubblewrap`)"
        )
    prlimit = shutil.which("prlimit", path="/usr/bin")
    if prlimit is None:
        return JailUnavailable("/usr/bin/prlimit (util-linux) not found: limits cannot be set")
    user = _jail_user(settings)
    if isinstance(user, JailUnavailable):
        return user
    workspace.mkdir(parents=True, exist_ok=True)
    masks = _masks(workspace, hidden)
    if isinstance(masks, JailUnavailable):
        return masks
    return Jail(
        bwrap=bwrap,
        prlimit=prlimit,
        shell=shutil.which("bash", path="/usr/bin") or "/bin/sh",
        python=None,
        workspace=workspace,
        user=user,
        masks=masks,
        flags=_flags(bwrap),
    )


def _jail_user(settings: SandboxSettings) -> tuple[int, int] | JailUnavailable | None:
    if os.geteuid() != 0:
        if settings.uid not in (None, os.geteuid()):
            return JailUnavailable("CAPSTAN_SANDBOX_UID needs a worker running as root")
        return None
    return root_jail_user(settings)


def root_jail_user(settings: SandboxSettings) -> tuple[int, int]:
    """The uid and gid a root worker's jail runs as (`CAPSTAN_SANDBOX_UID`, default nobody)."""
    uid = settings.uid or NOBODY
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = uid
    return uid, gid


def _masks(workspace: Path, hidden: Sequence[Path]) -> tuple[str, ...] | JailUnavailable:
    """Hide worker directories (data dir, key files) that lie inside the workspace."""
    root = workspace.resolve()
    if any(path.resolve() == root for path in hidden):
        return JailUnavailable(f"the workspace {workspace} is the worker's data directory")
    args: list[str] = []
    for path in hidden:
        target = path.resolve()
        if target == root or not target.is_relative_to(root):
            continue  # outside the workspace: the jail does not see it anyway
        inside = f"{WORKSPACE}/{target.relative_to(root)}"
        if target.is_dir():
            args += ["--tmpfs", inside, "--remount-ro", inside]
        elif target.exists():
            args += ["--ro-bind", "/dev/null", inside]
    return tuple(args)


@functools.cache
def _flags(bwrap: str) -> frozenset[str]:
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    text = done.stdout.decode(errors="replace")
    return frozenset(flag for flag in _OPTIONAL_FLAGS if flag in text)
