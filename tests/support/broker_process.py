"""A Warren broker running as a subprocess, for tests and stress scripts."""

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from tests.support.broker_address import BrokerAddress
from tests.support.broker_admin import WarrenAdmin

LISTENING = re.compile(
    r"event=(listening|listening_tls|management_listening) .*host=(\S+) port=(\d+)")


@dataclass
class BrokerProcess:
    """A Warren broker running as a subprocess; stderr is collected in `log_lines`.

    It counts as started once every listener it has is listening: the plain AMQP port
    (`port`), and the amqps port (`tls_port`) when `--tls-port` is among the arguments.
    A broker configured without the plain listener passes `plain_listener=False`.

    The management API listens on a free port (`management_port`) unless the arguments
    name a --management-port; it is up before the AMQP listener is logged."""

    data_dir: str
    extra_args: tuple = ()
    command_prefix: tuple = ()   # e.g. ("prlimit", "--nofile=200") to run it under limits
    host: str = "127.0.0.1"
    port: int = 0
    tls_port: int | None = None
    management_port: int | None = None
    plain_listener: bool = True
    process: subprocess.Popen | None = None
    log_lines: list = field(default_factory=list)
    _listening: threading.Event = field(default_factory=threading.Event)
    _logged: threading.Condition = field(default_factory=threading.Condition)
    _waiting_for: set = field(default_factory=set)

    @property
    def control_socket(self) -> str:
        """The broker's control socket (broker/server/control.py)."""
        return os.path.join(self.data_dir, "control.sock")

    def admin(self) -> WarrenAdmin:
        """Admin operations on this broker (users, vhosts, permissions...)."""
        return WarrenAdmin(self.control_socket)

    @property
    def management_url(self) -> str | None:
        if self.management_port is None:
            return None
        return f"http://{self.host}:{self.management_port}"

    def address(self) -> BrokerAddress:
        return BrokerAddress(self.host, self.port, self.control_socket, self.management_url)

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self._listening.clear()
        self._waiting_for = ({"listening"} if self.plain_listener else set()) | (
            {"listening_tls"} if "--tls-port" in self.extra_args else set())
        management = ((("--management-port", "auto") if self.management_port is None
                       else ("--management-port", str(self.management_port)))
                      if "--management-port" not in self.extra_args else ())
        command = [*self.command_prefix, sys.executable, "-m", "broker", "serve", "--host", self.host,
                   "--port", str(self.port), "--data-dir", self.data_dir, *management,
                   *self.extra_args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._listening.wait(timeout):
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.log_lines))
        return self

    def _read_log(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            with self._logged:
                self.log_lines.append(line)
                self._logged.notify_all()
            match = LISTENING.search(line)
            if match:
                event, port = match.group(1), int(match.group(3))
                if event == "management_listening":
                    self.management_port = port
                    continue
                if event == "listening":
                    self.port = port
                else:
                    self.tls_port = port
                self._waiting_for.discard(event)
                if not self._waiting_for:
                    self._listening.set()

    def wait_for_log(self, text: str, timeout: float = 30.0) -> str:
        """The first log line containing `text`, once the broker has written it; raises
        AssertionError when none has after `timeout` seconds."""
        def found() -> str | None:
            return next((line for line in self.log_lines if text in line), None)

        with self._logged:
            line = self._logged.wait_for(found, timeout)
        assert line is not None, f"no log line with {text!r} within {timeout} s"
        return line

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send `sig` and wait for the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
