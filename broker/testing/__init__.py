"""Warren as the broker of a test suite, with or without pytest.

    from broker.testing import TestBroker

    with TestBroker() as broker:          # a thread of this process, on a free port
        vhost = broker.new_vhost()        # a fresh vhost and user
        connection = pika.BlockingConnection(vhost.connection_parameters())
        ...
        vhost.remove()

The pytest plugin (broker/testing/pytest_plugin.py, registered as `warren`) gives the
same as fixtures: `warren_broker` for the session and `warren` per test. See
docs/testing.md.
"""

from .control_client import BrokerRefused
from .test_broker import BrokerStartFailed, TestBroker
from .test_vhost import NotOnThisBroker, TestVhost
from .virtual_time import VirtualTime

__all__ = ["BrokerRefused", "BrokerStartFailed", "NotOnThisBroker", "TestBroker",
           "TestVhost", "VirtualTime"]
