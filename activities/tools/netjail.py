"""The launcher of a jail with network: its own network namespace, reached through slirp4netns.

`Jail.argv` runs this file (as `python -I -S -c <this source> ...`) in front of bubblewrap when
a run's `sandbox.network` is true. The jail never shares the host's network namespace; its only
way out is a user-mode network stack, and these are shut before the jailed program starts:

1. bubblewrap starts with `--unshare-net --info-fd --block-fd`: namespaces built, program held;
2. slirp4netns attaches a `tap0` to the jail's network namespace (`--disable-host-loopback`: its
   gateway 10.0.2.2 never reaches the host's 127.0.0.0/8; no port forwarding, no API socket;
   `--enable-sandbox --enable-seccomp`);
3. `prohibit` routes, in the jail's namespace, for every special-purpose IPv4 range (private,
   shared, link-local with 169.254.169.254, test, multicast, reserved), the gateway, every
   address of the host's own interfaces and the `--deny` ranges; the jail holds no
   capabilities, so it cannot change them. There is no IPv6 (slirp4netns is started without
   it). The jail's `/etc/resolv.conf` names slirp's DNS forwarder (10.0.2.3) only;
4. only then is the program released. Anything failing on the way kills the jail before it ran
   and says so in one line on stderr (exit status 125): never a jail with an open network.

When the worker is root, this launcher runs as root (slirp4netns must open `/dev/net/tun`, which
may be root's only) and starts bubblewrap as the jail's uid (`--as UID:GID`).

Standard library only: it runs outside the worker's environment. Must never start the program
before the routes are in place, and never leave slirp4netns running after the jail.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = ["DENIED", "DNS", "GATEWAY", "Options", "host_addresses", "main", "parse", "routes"]

#: slirp4netns' default network: the jail is 10.0.2.100, the gateway (the host) 10.0.2.2
GATEWAY = "10.0.2.2"
DNS = "10.0.2.3"
#: IPv4 special-purpose ranges (RFC 6890 and successors): none of them leads to the internet
DENIED = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
_FAILED = 125
_LOOPBACK_POLLS = 2500  # of 2 ms: 5 s
_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_NS_GET_USERNS = 0xB701
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_RTM_NEWROUTE, _RTN_PROHIBIT, _RTA_DST = 24, 8, 1
_NLM_F_REQUEST_ACK_CREATE_EXCL = 0x1 | 0x4 | 0x400 | 0x200
_NLMSG_ERROR = 2


class LaunchError(RuntimeError):
    """The jail's network could not be shut as it must be: the jail is killed before it runs."""


class Options(NamedTuple):
    slirp: str
    deny: tuple[str, ...]
    user: tuple[int, int] | None
    bwrap: list[str]


def parse(argv: Sequence[str]) -> Options:
    """`--slirp PATH [--deny CIDR]... [--as UID:GID] -- BWRAP [ARGS]...`"""
    slirp, deny, user = "slirp4netns", [], None
    args = list(argv)
    while args and args[0] != "--":
        flag, value = args[0], args[1]
        del args[:2]
        if flag == "--slirp":
            slirp = value
        elif flag == "--deny":
            deny.append(str(ipaddress.ip_network(value, strict=False)))
        elif flag == "--as":
            uid, gid = value.split(":")
            user = int(uid), int(gid)
        else:
            raise LaunchError(f"unknown option {flag}")
    if len(args) < 2:
        raise LaunchError("no bubblewrap command line after --")
    return Options(slirp, tuple(deny), user, args[1:])


def host_addresses(fib_trie: str) -> list[str]:
    """The IPv4 addresses of the host's own interfaces, from `/proc/net/fib_trie`."""
    found: list[str] = []
    last = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:]
        elif text == "/32 host LOCAL" and last and last not in found:
            found.append(last)
    return found


def routes(deny: Iterable[str], host: Iterable[str]) -> list[ipaddress.IPv4Network]:
    """Every range the jail's namespace gets a `prohibit` route for (IPv4 only: it has no v6)."""
    wanted = [*DENIED, f"{GATEWAY}/32", *host, *deny]
    nets = {ipaddress.ip_network(item, strict=False) for item in wanted}
    v4 = [net for net in nets if isinstance(net, ipaddress.IPv4Network)]
    # the jail's own loopback stays its own (the local table wins over these anyway)
    return sorted(net for net in v4 if not net.subnet_of(_LOOPBACK))


def _route_message(net: ipaddress.IPv4Network, seq: int) -> bytes:
    rtmsg = struct.pack("BBBBBBBBI", socket.AF_INET, net.prefixlen, 0, 0, 254, 4, 0, 8, 0)
    attr = struct.pack("HH", 8, _RTA_DST) + net.network_address.packed
    body = rtmsg + attr
    header = struct.pack(
        "IHHII", 16 + len(body), _RTM_NEWROUTE, _NLM_F_REQUEST_ACK_CREATE_EXCL, seq, 0
    )
    return header + body


def _add_routes(nets: Sequence[ipaddress.IPv4Network]) -> None:
    """Add the routes over rtnetlink from the current (the jail's) network namespace."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        for seq, net in enumerate(nets, start=1):
            sock.send(_route_message(net, seq))
            reply = sock.recv(65536)
            kind = struct.unpack_from("H", reply, 4)[0]
            error = struct.unpack_from("i", reply, 16)[0] if kind == _NLMSG_ERROR else -1
            if error != 0:
                raise LaunchError(f"route {net}: {os.strerror(-error)}")


def _shut_in_child(netns: int, userns: int, nets: Sequence[ipaddress.IPv4Network]) -> None:
    """In a forked child: enter the jail's user and network namespaces, add the routes."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            for fd, kind in ((userns, _CLONE_NEWUSER), (netns, _CLONE_NEWNET)):
                if libc.setns(fd, kind) != 0:
                    raise LaunchError(f"setns: {os.strerror(ctypes.get_errno())}")
            _add_routes(nets)
            status = 0
        except (LaunchError, OSError) as exc:
            print(f"capstan network jail: {exc}", file=sys.stderr, flush=True)
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise LaunchError("the jail's routes could not be set")


def _child_pid(info: int) -> int:
    """bubblewrap's `--info-fd` JSON (read to its closing brace: the fd may stay open)."""
    data = b""
    while b"}" not in data:
        chunk = os.read(info, 4096)
        if not chunk:
            raise LaunchError("bubblewrap ended before the jail was built")
        data += chunk
    return int(json.loads(data[: data.index(b"}") + 1])["child-pid"])


def _await_loopback(jail: subprocess.Popen[bytes], pid: int) -> None:
    """Wait until bubblewrap has set up the jail's loopback (it does so while the program is
    held): slirp4netns touching the namespace earlier races with it, and bubblewrap fails."""
    for _ in range(_LOOPBACK_POLLS):
        with open(f"/proc/{pid}/net/fib_trie", encoding="ascii") as trie:
            if "127.0.0.1" in host_addresses(trie.read()):
                return
        if jail.poll() is not None:
            break
        time.sleep(0.002)
    raise LaunchError("bubblewrap did not set up the jail's loopback")


def _resolv_conf() -> int:
    fd = os.memfd_create("capstan-resolv", 0)
    os.write(fd, f"nameserver {DNS}\noptions edns0\n".encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _slirp(
    options: Options, pid: int, netns: int, userns: int
) -> tuple[subprocess.Popen[bytes], int]:
    """Start slirp4netns on the jail's namespace; wait until tap0 is up (or fail)."""
    exit_r, exit_w = os.pipe()
    ready_r, ready_w = os.pipe()
    argv = [
        options.slirp,
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        "--netns-type=path",
        f"--userns-path=/proc/self/fd/{userns}",
        f"--exit-fd={exit_r}",
        f"--ready-fd={ready_w}",
        f"/proc/self/fd/{netns}",
        "tap0",
    ]
    slirp = subprocess.Popen(
        argv,
        pass_fds=(exit_r, ready_w, netns, userns),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(exit_r)
    os.close(ready_w)
    ready = os.read(ready_r, 1)
    os.close(ready_r)
    if ready != b"1":
        os.close(exit_w)
        slirp.kill()
        slirp.wait()
        raise LaunchError(f"slirp4netns could not attach to the jail (pid {pid})")
    return slirp, exit_w


def _bwrap(options: Options, info_w: int, block_r: int, resolv: int) -> subprocess.Popen[bytes]:
    os.set_inheritable(info_w, True)
    os.set_inheritable(block_r, True)
    os.set_inheritable(resolv, True)
    head, rest = options.bwrap[0], options.bwrap[1:]
    argv = [head, "--info-fd", str(info_w), "--block-fd", str(block_r)]
    argv += ["--ro-bind-data", str(resolv), "/etc/resolv.conf", *rest]
    if options.user is None:
        return subprocess.Popen(argv, close_fds=False)
    uid, gid = options.user
    return subprocess.Popen(argv, close_fds=False, user=uid, group=gid, extra_groups=[])


def launch(options: Options) -> int:
    """Run the jail with its network shut as the module says; its exit status."""
    with open("/proc/net/fib_trie", encoding="ascii") as trie:
        nets = routes(options.deny, host_addresses(trie.read()))
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    jail = _bwrap(options, info_w, block_r, _resolv_conf())
    os.close(info_w)
    os.close(block_r)
    slirp: subprocess.Popen[bytes] | None = None
    exit_w, pid = -1, 0
    try:
        pid = _child_pid(info_r)
        _await_loopback(jail, pid)
        netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        userns = fcntl.ioctl(netns, _NS_GET_USERNS)
        slirp, exit_w = _slirp(options, pid, netns, userns)
        _shut_in_child(netns, userns, nets)
        os.write(block_w, b"1")
        os.close(block_w)
        return jail.wait()
    except (LaunchError, OSError) as exc:
        # the held program first: it would run when `block_w` closes, and bubblewrap's
        # --die-with-parent is not yet set while it waits
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        jail.kill()
        jail.wait()
        print(f"capstan network jail: {exc}; the program did not run", file=sys.stderr)
        return _FAILED
    finally:
        if slirp is not None:
            os.close(exit_w)
            try:
                slirp.wait(timeout=5)
            except subprocess.TimeoutExpired:
                slirp.kill()
                slirp.wait()


def main(argv: Sequence[str]) -> int:
    try:
        options = parse(argv)
    except (LaunchError, ValueError, IndexError) as exc:
        print(f"capstan network jail: {exc}", file=sys.stderr)
        return _FAILED
    return launch(options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
