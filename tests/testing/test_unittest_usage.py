"""Warren without pytest: a unittest suite with one TestBroker for the class and a vhost
per test. `OrderQueueTest` is the example (unittest runs it; pytest leaves it to the
test below, which runs this module through `python -m unittest`)."""

import os
import subprocess
import sys
import unittest
from pathlib import Path

import pika

from broker.testing import TestBroker


class OrderQueueTest(unittest.TestCase):
    __test__ = False   # run by unittest (below), not collected by pytest itself

    @classmethod
    def setUpClass(cls):
        cls.broker = TestBroker().start()   # a thread of this process, a free port
        cls.addClassCleanup(cls.broker.stop)

    def setUp(self):
        self.vhost = self.broker.new_vhost()   # a fresh vhost and user per test
        self.addCleanup(self.vhost.remove)
        self.connection = pika.BlockingConnection(self.vhost.connection_parameters())
        self.channel = self.connection.channel()
        self.addCleanup(self.connection.close)

    def test_publish_then_get(self):
        self.assertEqual(self.channel.queue_declare("orders").method.message_count, 0)
        self.channel.basic_publish("", "orders", b"order 1")
        self.channel.basic_publish("", "orders", b"order 2 (left in the queue)")
        method, _, body = self.channel.basic_get("orders", auto_ack=True)
        self.assertEqual(body, b"order 1")

    def test_each_test_has_its_own_queues(self):
        self.assertEqual(self.channel.queue_declare("orders").method.message_count, 0)
        self.channel.basic_publish("", "orders", b"order 3 (left in the queue)")

    def test_assert_clean_names_what_is_left(self):
        self.channel.queue_declare("orders")
        self.channel.basic_publish("", "orders", b"forgotten")
        with self.assertRaisesRegex(AssertionError, r"1 ready message\(s\) in queue 'orders'"):
            self.vhost.assert_clean()


def test_the_unittest_example_passes_under_unittest():
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-v", "test_unittest_usage"],
        cwd=Path(__file__).parent, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr
    report = done.stderr.splitlines()
    assert "Ran 3 tests" in " ".join(report) and report[-1] == "OK", done.stderr
