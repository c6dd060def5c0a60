"""`warren ctl` is the management API's client: it runs once per operator command, so it
must not import the server (trio, SQLAlchemy, the core). With them, every `warren ctl`
took about 1.4 s of imports before doing anything; without, about 0.1 s."""

import subprocess
import sys

CHECK = """
import sys
from broker.cli import main
# Port 1 of loopback refuses the connection: the verb runs its whole client path.
status = main(["ctl", "--url", "http://127.0.0.1:1", "list_queues"])
server = ("trio", "sqlalchemy", "broker.core.broker", "broker.server")
print(status, sorted(m for m in server if m in sys.modules))
"""


def test_warren_ctl_imports_none_of_the_servers_modules():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "69 []"   # 69: unreachable
