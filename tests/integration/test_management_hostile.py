"""Hostile input on the management listener: garbage instead of HTTP, an endless header,
a body larger than the limit, a connection that never finishes its request. Each is
refused on its own connection while a well-behaved AMQP client (the bystander) keeps
working, the broker keeps running and the API keeps answering."""

import socket

import httpx
import pytest

from tests.support.bystander import RunningBystander

pytestmark = pytest.mark.warren_only("attacks Warren's own broker process")

MAX_BODY = 20_000_000   # broker/server/management/bodies.py, RabbitMQ's default


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    from tests.support.broker_process import BrokerProcess
    process = BrokerProcess(data_dir=str(tmp_path_factory.mktemp("mgmt-hostile"))).start()
    yield process
    process.kill()


def http_socket(process) -> socket.socket:
    return socket.create_connection((process.host, process.management_port), timeout=30)


def still_serving(process) -> None:
    assert process.process.poll() is None, "the broker exited"
    answer = process.address().management().json("/api/whoami")
    assert answer["name"] == "guest"


def test_garbage_instead_of_http_is_refused_on_its_own_connection(attacked):
    with RunningBystander(attacked.address()):
        with http_socket(attacked) as sock:
            sock.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" * 100)
            reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 400") or reply == b""
        still_serving(attacked)


def test_an_endless_header_is_cut_off(attacked):
    with RunningBystander(attacked.address()):
        with http_socket(attacked) as sock:
            sock.sendall(b"GET /api/whoami HTTP/1.1\r\nHost: x\r\nX-Long: ")
            refused = False
            try:
                for _ in range(1000):   # 64 MiB at most; the server must stop reading
                    sock.sendall(b"a" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                refused = True
            if not refused:
                reply = sock.recv(65536)
                assert reply.startswith(b"HTTP/1.1 4") or reply == b""
        still_serving(attacked)


def test_a_body_over_the_limit_is_refused_before_it_is_held(attacked):
    api = attacked.address().management()
    with RunningBystander(attacked.address()):
        response = httpx.put(api.base_url + "/api/queues/%2F/too-big",
                             auth=("guest", "guest"), content=b"{" + b" " * MAX_BODY,
                             headers={"content-type": "application/json"}, timeout=60)
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"
        still_serving(attacked)


def test_a_request_that_never_ends_does_not_block_others(attacked):
    with RunningBystander(attacked.address()):
        with http_socket(attacked) as sock:
            sock.sendall(b"GET /api/whoami HTTP/1.1\r\nHost: x\r\n")   # no blank line
            still_serving(attacked)
        still_serving(attacked)
