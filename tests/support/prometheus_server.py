"""A Prometheus server for the tests: Debian's `prometheus` binary scraping one target
every second, with its own data directory and a free loopback port; queries go through
its HTTP API (/api/v1/query)."""

import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

PROMETHEUS = "/usr/bin/prometheus"
START_TIMEOUT = 60.0
QUERY_TIMEOUT = 30.0   # seconds a scraped value may take to show in a query


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrometheusServer:
    """Scrapes `target_url` (http://host:port/path) every second once started."""

    def __init__(self, target_url: str, work_dir: Path):
        assert shutil.which(PROMETHEUS), (
            f"{PROMETHEUS} not found: install Debian's prometheus package "
            "(scripts/test.sh does)")
        self.target = urlsplit(target_url)
        self.work_dir = work_dir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "PrometheusServer":
        config = self.work_dir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: broker\n"
            f"    metrics_path: {self.target.path}\n"
            f"    static_configs:\n      - targets: ['{self.target.netloc}']\n")
        self.log = open(self.work_dir / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={self.work_dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._ready():
            assert self.process.poll() is None, (
                f"prometheus exited: {(self.work_dir / 'prometheus.log').read_text()[-2000:]}")
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.1)   # another process: its readiness endpoint is all there is
        return self

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def query(self, promql: str) -> list[dict]:
        """The instant vector `promql` evaluates to now (each {"metric", "value"})."""
        answer = httpx.get(self.url + "/api/v1/query", params={"query": promql},
                           timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def wait_for(self, promql: str, holds, timeout: float = QUERY_TIMEOUT) -> float:
        """Query until `promql` gives one sample whose value `holds(value)`, and return
        it; fails with the last answer after `timeout` seconds (scrapes happen every
        second)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if len(result) == 1 and holds(float(result[0]["value"][1])):
                return float(result[0]["value"][1])
            assert time.monotonic() < deadline, (
                f"{promql} did not reach the expected value within {timeout} s: {result}")
            time.sleep(0.2)   # Prometheus scrapes on its own clock: ask again

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.log.close()
