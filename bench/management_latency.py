"""How long AMQP waits while the management listener answers: the round trip of a
passive Queue.Declare, called back to back for --duration seconds, without and then with
a client fetching --path once a second, while --queues queues exist (default 10,000).
Prints the 99th percentile and the worst round trip of each.

    python3 bench/management_latency.py                           # /metrics/per-object
    python3 bench/management_latency.py --path /api/queues
"""

import argparse
import tempfile
import threading
import time

import httpx
import pika

from management_poll import declare_queues, start_warren


def round_trips(channel, seconds: float) -> tuple[float, float]:
    """(99th percentile, worst) round trip in ms over `seconds` of passive declares."""
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        channel.queue_declare("poll-bench-1", passive=True)
        times.append(time.perf_counter() - started)
    times.sort()
    return 1000 * times[len(times) * 99 // 100], 1000 * times[-1]


def fetch_every_second(url: str, path: str, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, auth=("guest", "guest"), timeout=60) as client:
        while not stop.is_set():
            client.get(path).raise_for_status()
            stop.wait(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--path", default="/metrics/per-object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        process, port, management_port = start_warren(data_dir)
        try:
            declare_queues(port, args.queues)
            connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
            channel = connection.channel()
            quiet = round_trips(channel, args.duration)
            stop = threading.Event()
            poller = threading.Thread(target=fetch_every_second, args=(
                f"http://127.0.0.1:{management_port}", args.path, stop))
            poller.start()
            try:
                busy = round_trips(channel, args.duration)
            finally:
                stop.set()
                poller.join()
            connection.close()
        finally:
            process.terminate()
            process.wait(30)
    print(f"queues: {args.queues}; AMQP round trip p99 / worst: {quiet[0]:.1f} / "
          f"{quiet[1]:.1f} ms without, {busy[0]:.1f} / {busy[1]:.1f} ms with {args.path} "
          f"once a second")


if __name__ == "__main__":
    main()
