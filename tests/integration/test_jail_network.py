"""A jail with network never reaches the host: its loopback (the Temporal server, the blob
store), its own interfaces, or link-local addresses (cloud metadata) — issue 26.

The jail is real (bubblewrap, and slirp4netns for the network), as in the escape corpus; each
connect below is made by a program in the jail, and each listener is the test's, on the host.
Every destination is refused inside the jail's own network namespace (by its routes), so no
packet leaves this machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.activities.tools import netjail
from capstan.activities.tools.jail import Jail
from capstan.activities.tools.sandbox import run_jailed
from capstan.core.spec import SandboxLimits
from capstan.runtime.embedded import EmbeddedServer
from tests.sandbox_helpers import jail_for, jail_workspace, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the tests below

pytestmark = needs_jail

NETWORK = SandboxLimits(wall_seconds=30, cpu_seconds=10, processes=32, network=True)
#: a program that connects to each (host, port) of its argument and prints what happened
CONNECT = """
import errno, socket, sys
for target in {targets!r}:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "CONNECTED")
    except OSError as exc:
        print(target, errno.errorcode.get(exc.errno or 0, str(exc)))
"""


@pytest.fixture
def jail(jail_workspace: Path) -> Jail:
    return jail_for(jail_workspace)


@contextlib.contextmanager
def listening(host: str) -> Iterator[socket.socket]:
    with socket.create_server((host, 0)) as listener:
        listener.settimeout(0.2)
        yield listener


async def connects(
    jail: Jail, targets: list[str], limits: SandboxLimits = NETWORK
) -> dict[str, str]:
    """What a program in the jail saw for each target (CONNECTED or the errno's name)."""
    if jail.python is None:
        pytest.skip("the jail has no python3")
    ran = await run_jailed(
        jail,
        limits,
        "python",
        CONNECT.format(targets=targets),
        key=f"net-{uuid.uuid4().hex[:6]}",
        wall=limits.wall_seconds,
    )
    text = ran.output.decode(errors="replace")
    assert ran.status == 0, text
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def nothing_arrived(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except TimeoutError:
        return True
    return False


def host_address() -> str | None:
    """An address of this host's own (non-loopback) interfaces, if it has one."""
    with open("/proc/net/fib_trie", encoding="ascii") as trie:
        found = [a for a in netjail.host_addresses(trie.read()) if not a.startswith("127.")]
    return found[0] if found else None


async def test_the_temporal_server_on_loopback_is_out_of_reach(
    jail: Jail, dev_server: EmbeddedServer
) -> None:
    with socket.create_connection(("127.0.0.1", dev_server.port), timeout=5):
        pass  # the host reaches it: the server is there
    seen = await connects(jail, [f"127.0.0.1:{dev_server.port}", f"localhost:{dev_server.port}"])
    assert "CONNECTED" not in seen.values(), seen


async def test_a_blob_store_listening_on_loopback_is_out_of_reach(jail: Jail) -> None:
    with listening("127.0.0.1") as listener:
        port = listener.getsockname()[1]
        seen = await connects(jail, [f"127.0.0.1:{port}", f"127.1.2.3:{port}"])
        assert "CONNECTED" not in seen.values(), seen
        assert nothing_arrived(listener)


async def test_link_local_and_the_cloud_metadata_address_are_refused_in_the_jail(
    jail: Jail,
) -> None:
    seen = await connects(jail, ["169.254.169.254:80", "169.254.0.1:443", "[fe80::1]:80"])
    assert "CONNECTED" not in seen.values(), seen
    if jail.network is not None:  # refused by the jail's own routes: nothing was sent
        assert seen["169.254.169.254:80"] == "EACCES", seen
        assert seen["169.254.0.1:443"] == "EACCES", seen


async def test_the_hosts_own_interface_address_is_out_of_reach(jail: Jail) -> None:
    address = host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with listening("0.0.0.0") as listener:  # as a worker's health port or an S3 server may
        port = listener.getsockname()[1]
        with socket.create_connection((address, port), timeout=5) as own:
            listener.accept()[0].close()  # the host itself reaches it
            own.close()
        seen = await connects(jail, [f"{address}:{port}", f"10.0.2.2:{port}"])
        assert "CONNECTED" not in seen.values(), seen
        assert nothing_arrived(listener)
        if jail.network is not None:
            assert seen == {f"{address}:{port}": "EACCES", f"10.0.2.2:{port}": "EACCES"}, seen


async def test_a_network_jail_has_a_stack_of_its_own_with_the_host_shut(jail: Jail) -> None:
    if jail.network is None:
        pytest.skip(f"no network jails here ({jail.network_unavailable}): `make system-deps`")
    ran = await run_jailed(
        jail,
        NETWORK,
        "shell",
        "cat /proc/net/route; echo ---; cat /etc/resolv.conf",
        key="net-routes",
        wall=30,
    )
    text = ran.output.decode()
    routes, resolv = text.split("---")
    # a default route through slirp's tap0, and prohibit routes (flag 0x0201: up, reject)
    assert any(line.split()[:2] == ["tap0", "00000000"] for line in routes.splitlines()), text
    assert "0000FEA9" in routes  # 169.254.0.0/16, little-endian hex
    assert resolv.split() == ["nameserver", netjail.DNS, "options", "edns0"]


async def test_a_jail_without_network_has_only_its_own_loopback(jail: Jail) -> None:
    ran = await run_jailed(
        jail,
        NETWORK.model_copy(update={"network": False}),
        "shell",
        "cat /proc/net/dev",
        key="net-none",
        wall=30,
    )
    names = [line.split(":")[0].strip() for line in ran.output.decode().splitlines()[2:]]
    assert names == ["lo"], ran.output


async def test_a_broken_network_stack_fails_closed_before_the_program_runs(
    jail: Jail,
) -> None:
    if jail.network is None:
        pytest.skip(f"no network jails here ({jail.network_unavailable}): `make system-deps`")
    broken = dataclasses.replace(
        jail, network=dataclasses.replace(jail.network, slirp4netns="/bin/false")
    )
    ran = await run_jailed(broken, NETWORK, "shell", "echo RAN", key="net-broken", wall=30)
    text = ran.output.decode()
    assert ran.status == 125 and "RAN" not in text, text
    assert "capstan network jail: slirp4netns could not attach" in text
