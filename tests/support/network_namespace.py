"""A network namespace joined to this machine by a veth pair, for tests that need a
client on a non-loopback address (loopback_users).

    namespace = ClientNamespace.unique()
    try:
        namespace.create()      # fails the test, saying what is missing, if it cannot
        namespace.run(sys.executable, "probe.py", namespace.host_address, ...)
    finally:
        namespace.remove()      # whatever create() got to

The host end of the pair gets `host_address`, the namespace end `client_address`, both
in a /30 of 10.0.0.0/8 that no interface of this machine uses, so a program run inside
the namespace reaches a server listening on `host_address` (or 0.0.0.0) of this machine,
and the server sees it come from `client_address`. Names carry the process id and random
digits, so parallel runs do not meet. Creating it needs root (CAP_NET_ADMIN) and the
`ip` command of iproute2 (scripts/test.sh installs it).
"""

import ipaddress
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass

import pytest

COMMAND_TIMEOUT = 30   # seconds for one `ip` command on a loaded machine


@dataclass
class ClientNamespace:
    name: str
    host_address: str = ""
    client_address: str = ""

    @classmethod
    def unique(cls) -> "ClientNamespace":
        # Interface names are at most 15 bytes: "wl" + pid + 4 hex digits + "h"/"n".
        return cls(f"wl{os.getpid() % 10**7}{secrets.token_hex(2)}")

    @property
    def host_link(self) -> str:
        return self.name + "h"

    @property
    def client_link(self) -> str:
        return self.name + "n"

    def create(self) -> None:
        _require_tools()
        network = _unused_network()
        host, client = list(network.hosts())
        self.host_address, self.client_address = str(host), str(client)
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name",
            self.client_link, "netns", self.name)
        _ip("address", "add", f"{host}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        _ip("-n", self.name, "address", "add", f"{client}/30", "dev", self.client_link)
        _ip("-n", self.name, "link", "set", self.client_link, "up")
        _ip("-n", self.name, "link", "set", "lo", "up")

    def remove(self) -> None:
        """Delete the namespace and both ends of the pair, as far as they exist."""
        if shutil.which("ip") is None:
            return          # nothing was created
        for command in (("netns", "delete", self.name), ("link", "delete", self.host_link)):
            subprocess.run(["ip", *command], capture_output=True, timeout=COMMAND_TIMEOUT)

    def run(self, *command: str, timeout: float) -> subprocess.CompletedProcess:
        """Run `command` inside the namespace (with this process's environment)."""
        return subprocess.run(["ip", "netns", "exec", self.name, *command],
                              capture_output=True, text=True, timeout=timeout)


def _require_tools() -> None:
    if shutil.which("ip") is None:
        pytest.fail("cannot create a network namespace: the `ip` command is missing; "
                    "install the Debian package iproute2 (scripts/test.sh does)")
    if os.geteuid() != 0:
        pytest.fail("cannot create a network namespace: it needs root (CAP_NET_ADMIN); "
                    "run the tests as root, as CI does")


def _ip(*arguments: str) -> None:
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT)
    if result.returncode != 0:
        pytest.fail(f"cannot set up the test's network namespace: `ip "
                    f"{' '.join(arguments)}` failed: {result.stderr.strip()} (it needs "
                    "root with CAP_NET_ADMIN, iproute2, and network namespace support "
                    "in the kernel)")


def _unused_network() -> ipaddress.IPv4Network:
    """A random /30 of 10.0.0.0/8 that overlaps no address of this machine."""
    result = subprocess.run(["ip", "-o", "-4", "address", "show"], capture_output=True,
                            text=True, timeout=COMMAND_TIMEOUT, check=True)
    taken = [ipaddress.ip_interface(line.split()[3]).network
             for line in result.stdout.splitlines()]
    while True:
        candidate = ipaddress.ip_network(f"10.{random.randrange(64, 255)}."
                                         f"{random.randrange(256)}."
                                         f"{4 * random.randrange(64)}/30")
        if not any(candidate.overlaps(network) for network in taken):
            return candidate
