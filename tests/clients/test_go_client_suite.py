"""amqp091-go's own integration tests against the broker: the tests its maintainers run
against RabbitMQ (integration_test.go and the other _test.go files, build tag
`integration`), as Debian's golang-github-rabbitmq-amqp091-go-dev ships them with the
client's source (1.5.0). They are compiled with `go test -c` (go_support) and run
unchanged, with AMQP_URL naming a fresh vhost and user of this test.

Running them found that Warren closed its socket right after the Close-Ok of a client's
Connection.Close: late bytes were answered with a reset, and TestConcurrentClose got 501
"connection reset by peer" from Connection.Close, about one run in ten
(docs/compatibility.md; test_protocol_negotiation.py checks it every time).
"""

import os
import re
import subprocess

import pytest

from tests.support.go_support import build_client_tests

RUN_TIMEOUT = 300.0   # about 15 s against Warren, 85 s against RabbitMQ 3.10.8

# Left out, with why. Each of these closes its connection only when the server's product
# is "RabbitMQ" (and checks RabbitMQ-only behaviour then); on Warren the connection stays
# open, and the suite's goroutine leak check (goleak, run after all tests) fails.
LEFT_OUT = {
    "TestIntegrationRecoverNotImplemented": "product-gated: Basic.Recover requeue=false",
    "TestRabbitMQQueueNackMultipleRequeue": "product-gated",
    "TestRabbitMQQueueTTLGet": "product-gated",
}


@pytest.fixture(scope="module")
def client_tests(tmp_path_factory):
    return build_client_tests(tmp_path_factory.mktemp("go-client-tests"))


def test_amqp091_go_integration_suite_passes(client_tests, warren):
    listing = subprocess.run([str(client_tests), "-test.list", "^Test"], capture_output=True,
                             text=True, timeout=RUN_TIMEOUT, check=True).stdout
    listed = re.findall(r"^Test\w+$", listing, re.MULTILINE)   # (it prints a notice too)
    selected = [name for name in listed if name not in LEFT_OUT]
    assert len(selected) > 100 and set(LEFT_OUT) <= set(listed)
    run = subprocess.run(
        [str(client_tests), "-test.v", "-test.timeout", f"{int(RUN_TIMEOUT - 30)}s",
         "-test.run", f"^({'|'.join(selected)})$"],
        env={**os.environ, "AMQP_URL": warren.url}, capture_output=True, text=True,
        timeout=RUN_TIMEOUT)
    output = run.stdout + run.stderr
    failed = re.findall(r"^\s*--- FAIL: (\S+)", output, re.MULTILINE)
    assert run.returncode == 0 and not failed, f"failed: {failed}\n{output[-6000:]}"
    passed = set(re.findall(r"^\s*--- PASS: (\S+)", output, re.MULTILINE))
    assert set(selected) <= passed, f"not run: {sorted(set(selected) - passed)}"
