"""`warren serve`: runs the broker (the `warren` command line's other verb, `ctl`, is
broker/ctl; broker/cli.py picks one)."""

import argparse
import gc
import json
import logging
import shutil
import sys
import tempfile
import time

from broker import __version__
from broker.build import BuildMismatch, build_kind, check_expected_build
from broker.config import ConfigError, load_settings, management_port
from broker.core.rabbitmq_lines import DEFAULT_LINE, LINES
from broker.server.listener import Server
from broker.server.node import DefinitionsRefused, Node, run_until_stopped


class KeyValueFormatter(logging.Formatter):
    """One line per event: timestamp, level, logger, then the message's key=value pairs."""

    @staticmethod
    def converter(seconds: float | None = None) -> time.struct_time:
        """Timestamps in UTC (the "Z" of the format)."""
        return time.gmtime(seconds)

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%Y-%m-%dT%H:%M:%SZ")
        line = f"{stamp} level={record.levelname} logger={record.name} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="warren", description="The `warren` command line.", epilog=(
        "warren ctl VERB ...: the rabbitmqctl-style client of the management API "
        "(warren ctl --help)"))
    parser.add_argument("--version", action="version",
                        version=f"warren {__version__}, {build_kind()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int,
                       help="AMQP port (default 5672; 0 picks a free one, logged as "
                            "event=listening)")
    serve.add_argument("--tls-port", type=int,
                       help="amqps port (default: none, or [tls] port of the configuration "
                            "file; 0 picks a free one, logged as event=listening_tls)")
    serve.add_argument("--management-port", type=management_port,
                       help="port of the management HTTP API, metrics and web UI "
                            "(default 15672; 0 turns it off; 'auto' picks a free one, "
                            "logged as event=management_listening)")
    serve.add_argument("--data-dir", help="data directory (default ./data)")
    serve.add_argument("--metadata-url",
                       help="SQLAlchemy URL of the metadata database (default: SQLite "
                            "in the data directory)")
    serve.add_argument("--control-socket",
                       help="Unix socket for admin operations (default: control.sock in "
                            "the data directory; '' turns it off)")
    serve.add_argument("--load-definitions", metavar="FILE",
                       help="RabbitMQ definitions JSON to apply at boot, after the "
                            "metadata store is restored and before the listeners open")
    serve.add_argument("--rabbitmq", choices=list(LINES), metavar="LINE",
                       help="the RabbitMQ line to behave as: "
                            f"{', '.join(LINES)} (default {DEFAULT_LINE.name}); "
                            "see docs/compatibility.md")
    serve.add_argument("--config", help="TOML configuration file; flags override it")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                       help="default info (warning with --ephemeral)")
    serve.add_argument("--ephemeral", action="store_true",
                       help="a throw-away broker for a test suite: data in a new "
                            "temporary directory removed at exit (unless --data-dir is "
                            "given), AMQP and management on "
                            "free ports unless given; prints one JSON line with its "
                            "amqp_url, host, port, management_url and control_socket "
                            "on stdout once it listens")
    serve.add_argument("--testing", action="store_true",
                       help="also answer the test hooks (inspection, waits, fault "
                            "injection, virtual time: the broker's clock runs at real "
                            "speed until test.advance moves it) on the control socket: "
                            "for test brokers only, see docs/testing.md")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    ephemeral_dir = (tempfile.mkdtemp(prefix="warren-")
                     if args.ephemeral and not args.data_dir else None)
    try:
        return _serve(args, ephemeral_dir)
    finally:
        if ephemeral_dir is not None:
            shutil.rmtree(ephemeral_dir, ignore_errors=True)


def _serve(args: argparse.Namespace, ephemeral_dir: str | None) -> int:
    overrides = {
        "host": args.host, "port": args.port, "data_dir": args.data_dir,
        "metadata_url": args.metadata_url, "log_level": args.log_level,
        "control_socket": args.control_socket, "tls_port": args.tls_port,
        "management_port": args.management_port,
        "load_definitions": args.load_definitions, "rabbitmq": args.rabbitmq}
    if args.ephemeral:
        overrides.update(data_dir=args.data_dir or ephemeral_dir, port=_or(args.port, 0),
                         management_port=_or(args.management_port, "auto"),
                         log_level=_or(args.log_level, "warning"))
    try:
        settings = load_settings(args.config, overrides)
        configure_logging(settings.log_level)
        build = check_expected_build()
        node = Node(settings, testing=args.testing)
    except (ConfigError, DefinitionsRefused, BuildMismatch) as error:
        print(f"warren: {error}", file=sys.stderr)
        return 2
    logging.getLogger("warren.server").info(
        "event=starting version=%s build=%r", __version__, build)
    if args.ephemeral:
        node.server.on_listening = _print_addresses
    freeze_start_up_objects()
    try:
        run_until_stopped(node)
    except OSError as error:
        logging.getLogger("warren.server").error(
            "event=listen_failed host=%s port=%s tls_port=%s management_port=%s error=%r "
            "hint=%r", settings.host, settings.port, settings.tls.port,
            settings.management.port, error.strerror or str(error),
            "another process uses this port: stop it or pass --port (--tls-port, "
            "--management-port)")
        return 1
    return 0


def freeze_start_up_objects() -> None:
    """Move what exists once the node is built (modules, settings, the broker restored
    from the data directory: about 80,000 tracked objects) out of the cyclic garbage
    collector's sight: they live as long as the process, and every full collection
    walked them all, pausing the event loop 30-130 ms (docs/history/benchmarks-rounds.md, issue 18,
    "full collections")."""
    gc.collect()
    gc.freeze()
    logging.getLogger("warren.server").debug("event=start_up_objects_frozen count=%d",
                                             gc.get_freeze_count())


def _or(value, default):
    return default if value is None else value


def _print_addresses(server: Server) -> None:
    """What an ephemeral broker prints on stdout once it listens: one JSON line that a
    test suite in any language can read (then the broker runs until SIGTERM)."""
    # The default vhost as %2F: by the AMQP URI spec (and the Java and Go clients) a
    # bare "/" path names the empty vhost.
    addresses = {"amqp_url": f"amqp://guest:guest@{server.host}:{server.port}/%2F",
                 "host": server.host, "port": server.port,
                 "management_url": (f"http://{server.management.host}:"
                                    f"{server.management.port}"
                                    if server.management is not None else None),
                 "control_socket": server.control.path if server.control else None}
    print(json.dumps(addresses), flush=True)
