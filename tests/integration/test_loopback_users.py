"""loopback_users over a real network: a pika client in a network namespace that the test
creates (a veth pair, tests/support/network_namespace.py) logs in from a non-loopback
address of this machine.

- guest from there is refused with RabbitMQ 3.10's 403 and text; another user is let in
  from the same address; guest from 127.0.0.1 is let in; Warren logs why it refused.
- `loopback_users = []` lets guest in from anywhere.

With WARREN_TEST_BROKER=127.0.0.1:5673 the first test runs against that broker instead
(RabbitMQ listens on every interface, so the namespace reaches it at the host end's
address; the other user is made with rabbitmqctl), showing that both refuse guest the
same way. A namespace that cannot be created fails the test, naming what is missing.
"""

import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.core.passwords import SHA256_ALGORITHM, hash_password
from tests.support.broker_admin import RabbitAdmin
from tests.support.broker_process import BrokerProcess
from tests.support.login_probe import probe
from tests.support.network_namespace import ClientNamespace
from storage.metadata import MetadataStore, PasswordHash

PROBE = str(Path(__file__).parents[1] / "support" / "login_probe.py")
PROBE_TIMEOUT = 90   # seconds for one probe: a Python start-up and a pika handshake
REFUSED = (403, "ACCESS_REFUSED - Login was refused using authentication mechanism "
                "PLAIN. For details see the broker logfile.")


@dataclass
class Target:
    """A broker listening on every interface, and the logins to try on it."""
    port: int
    guest_password: str
    user: str                       # not in loopback_users
    password: str
    warren: BrokerProcess | None    # None: the broker named by WARREN_TEST_BROKER


@pytest.fixture(scope="module")
def namespace():
    created = ClientNamespace.unique()
    try:
        created.create()
        yield created
    finally:
        created.remove()


@pytest.fixture
def target(broker_factory, tmp_path):
    external = os.environ.get("WARREN_TEST_BROKER")
    if external:
        yield from _rabbitmq_target(int(external.rsplit(":", 1)[1]))
    else:
        yield _warren_target(broker_factory, tmp_path, "")


def _warren_target(broker_factory, tmp_path, config: str) -> Target:
    """Warren on 0.0.0.0 with guest and one more user in its metadata store (the broker
    reads users at start-up), each with a password the test can look for in the log."""
    guest_password = "guest-" + secrets.token_hex(8)
    user, password = "loopback-alice", "alice-" + secrets.token_hex(8)
    data_dir = str(tmp_path / "data")
    with MetadataStore.open(None, data_dir, _hashed(guest_password)) as store:
        store.add_user(user, _hashed(password))
        store.set_permissions(user, "/")
    config_file = tmp_path / "warren.toml"
    config_file.write_text(config)
    warren = broker_factory("--host", "0.0.0.0", "--config", str(config_file),
                            data_dir=data_dir)
    return Target(warren.port, guest_password, user, password, warren)


def _rabbitmq_target(port: int):
    user, password = "loopback-" + secrets.token_hex(6), secrets.token_hex(12)
    admin = RabbitAdmin()
    admin.add_user(user, password)
    try:
        admin.set_permissions(user, "/", ".*", ".*", ".*")
        yield Target(port, "guest", user, password, None)
    finally:
        admin.delete_user(user)


def _hashed(password: str) -> PasswordHash:
    return PasswordHash(hash_password(password), SHA256_ALGORITHM)


def _log_in_from(namespace: ClientNamespace, port: int, user: str, password: str) -> dict:
    """Log in with pika from inside the namespace, to the host end's address."""
    result = namespace.run(sys.executable, PROBE, namespace.host_address, str(port), user,
                           password, timeout=PROBE_TIMEOUT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _refusal(outcome: dict) -> tuple:
    assert not outcome["opened"], "the login was accepted"
    return outcome.get("reply_code"), outcome.get("reply_text", outcome.get("error"))


def test_guest_is_refused_from_a_non_loopback_address_and_accepted_from_loopback(
        namespace, target):
    guest = _log_in_from(namespace, target.port, "guest", target.guest_password)
    other = _log_in_from(namespace, target.port, target.user, target.password)
    local_guest = probe("127.0.0.1", target.port, "guest", target.guest_password)

    assert _refusal(guest) == REFUSED
    assert other == {"opened": True}
    assert local_guest == {"opened": True}
    if target.warren is not None:
        line = target.warren.wait_for_log("event=login_refused")
        assert f"peer={namespace.client_address}:" in line
        assert "user='guest'" in line and "reason=not_loopback" in line
        log = "".join(target.warren.log_lines)
        assert target.guest_password not in log and target.password not in log


@pytest.mark.warren_only("Warren's loopback_users setting, on a Warren broker of its own")
def test_an_empty_loopback_users_lets_guest_in_from_anywhere(namespace, broker_factory,
                                                              tmp_path):
    warren = _warren_target(broker_factory, tmp_path, "loopback_users = []\n")
    assert _log_in_from(namespace, warren.port, "guest", warren.guest_password) == {
        "opened": True}
