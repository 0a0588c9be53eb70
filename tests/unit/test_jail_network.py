"""The network jail's pure parts: which ranges it shuts, who starts it, what the worker says when
it cannot have one (the jail's real behaviour: tests/integration/test_jail_network.py)."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from pathlib import Path

import pytest

from capstan.activities.tools import netjail
from capstan.activities.tools.jail import Jail, NetworkLauncher, SandboxSettings, spawn_identity
from capstan.core.spec import SandboxLimits
from capstan.host.sandbox import sandbox_jail
from capstan.runtime.config import ConfigError, Settings
from tests.sandbox_helpers import jail_workspace, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the test below

JAIL = Jail(
    bwrap="/usr/bin/bwrap",
    prlimit="/usr/bin/prlimit",
    shell="/usr/bin/bash",
    python="/usr/bin/python3",
    workspace=Path("/srv/ws"),
    user=(65534, 65534),
    network=NetworkLauncher("/usr/bin/python3", "source", "/usr/bin/slirp4netns", ("8.8.8.8/32",)),
)
FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 203.0.113.0/24 2 0 2
           |-- 203.0.113.7
              /24 link UNICAST
           |-- 203.0.113.9
              /32 host LOCAL
        |-- 203.0.113.255
           /32 link BROADCAST
"""


def shut(address: str) -> bool:
    """Whether the jail's routing table refuses `address`: the longest matching route wins,
    among the prohibit routes and slirp's own (the default route, tap0's 10.0.2.0/24)."""
    prohibit = netjail.routes(["198.51.100.0/24"], ["203.0.113.9"])
    table = [(net, True) for net in prohibit]
    table += [(ipaddress.IPv4Network("0.0.0.0/0"), False)]
    table += [(ipaddress.IPv4Network("10.0.2.0/24"), False)]
    matching = [
        (net.prefixlen, refused) for net, refused in table if ipaddress.ip_address(address) in net
    ]
    return max(matching)[1]


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # cloud metadata
        "169.254.0.1",
        "10.0.2.2",  # slirp's gateway: the host
        "10.1.2.3",
        "172.17.0.1",  # a container host's bridge
        "192.168.1.1",
        "100.64.0.1",
        "203.0.113.9",  # an address of the host's own interfaces
        "198.51.100.20",  # a --deny range (CAPSTAN_SANDBOX_NETWORK_DENY)
        "224.0.0.251",
        "255.255.255.255",
    ],
)
def test_the_host_private_and_link_local_ranges_are_shut(address: str) -> None:
    assert shut(address)


@pytest.mark.parametrize("address", ["10.0.2.3", "93.184.216.34", "1.1.1.1"])
def test_the_dns_forwarder_and_the_internet_stay_open(address: str) -> None:
    assert not shut(address)


def test_the_jails_own_loopback_gets_no_route_and_the_hosts_addresses_are_read() -> None:
    assert netjail.host_addresses(FIB_TRIE) == ["127.0.0.1", "203.0.113.9"]
    nets = netjail.routes([], netjail.host_addresses(FIB_TRIE))
    assert not any(net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) for net in nets)


def test_the_launcher_runs_as_the_worker_and_starts_bwrap_as_the_jails_uid() -> None:
    argv = JAIL.argv(SandboxLimits(network=True), 5, "shell")
    head = argv[: argv.index("/usr/bin/bwrap")]
    assert head == [
        *["/usr/bin/python3", "-I", "-S", "-c", "source", "--slirp", "/usr/bin/slirp4netns"],
        *["--deny", "8.8.8.8/32", "--as", "65534:65534", "--"],
    ]
    options = netjail.parse(head[5:] + argv[len(head) :])
    assert options.user == (65534, 65534) and options.bwrap[0] == "/usr/bin/bwrap"
    assert spawn_identity(JAIL, SandboxLimits(network=True)) == {}
    assert spawn_identity(JAIL, SandboxLimits())["user"] == 65534  # no network: bwrap as before
    no_stack = dataclasses.replace(JAIL, network=None)
    assert spawn_identity(no_stack, SandboxLimits(network=True))["user"] == 65534


def test_more_denied_ranges_come_from_the_environment() -> None:
    env = {"CAPSTAN_SANDBOX_NETWORK_DENY": "8.8.8.8, 203.0.113.0/24"}
    assert SandboxSettings.from_env(env).network_deny == "8.8.8.8/32,203.0.113.0/24"
    with pytest.raises(ConfigError):
        SandboxSettings.from_env({"CAPSTAN_SANDBOX_NETWORK_DENY": "not-a-range"})


@needs_jail
def test_a_worker_without_a_network_stack_says_so_at_start(
    jail_workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path / "data", workspace=jail_workspace)
    caplog.set_level(logging.INFO, logger="capstan.worker")
    env = {"CAPSTAN_SLIRP4NETNS": str(tmp_path / "no-slirp"), "CAPSTAN_SANDBOX_NETWORK": "1"}
    jail = sandbox_jail(settings.model_copy(update={"sandbox_network": True}), env)
    assert jail is not None and jail.network is None
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "sandbox.network" in r.msg]
    assert said == [
        (
            logging.ERROR,
            "sandbox.network: jails get no network on this worker: slirp4netns not found "
            f"(CAPSTAN_SLIRP4NETNS={tmp_path / 'no-slirp'}); install it (Debian package "
            "`slirp4netns`)",
        )
    ]
    # and a call that asks for the network gets none: never the host's
    assert "--share-net" not in jail.argv(SandboxLimits(network=True), 5, "shell")
