"""The `warren` command line."""

import argparse
import json
import logging
import os
import sys
import time

import trio

from broker import __version__
from broker.config import ConfigError, load_settings, management_port
from broker.core import definitions
from broker.core.admin import Administration
from broker.core.broker import Broker
from broker.server.admission import default_connection_caps, raise_file_limit
from broker.server.committer import GroupCommitter
from broker.server.control import CONTROL_SOCKET_NAME, MAX_SOCKET_PATH, ControlSocket
from broker.server.durability import DurableStorage
from broker.server.listener import Server
from broker.server.management.listener import ManagementListener
from broker.server.tls import TlsListener, server_context


class KeyValueFormatter(logging.Formatter):
    """One line per event: timestamp, level, logger, then the message's key=value pairs."""

    converter = time.gmtime

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
    parser = argparse.ArgumentParser(prog="warren", description=__doc__, epilog=(
        "warren ctl VERB ...: the rabbitmqctl-style client of the management API "
        "(warren ctl --help)"))
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
    serve.add_argument("--config", help="TOML configuration file; flags override it")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                       help="default info")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ctl"]:   # the management API's client: `warren ctl --help`
        from broker.ctl.command import main as ctl_main
        return ctl_main(argv[1:])
    args = parse_args(argv)
    try:
        settings = load_settings(args.config, {
            "host": args.host, "port": args.port, "data_dir": args.data_dir,
            "metadata_url": args.metadata_url, "log_level": args.log_level,
            "control_socket": args.control_socket, "tls_port": args.tls_port,
            "management_port": args.management_port,
            "load_definitions": args.load_definitions})
        tls = (TlsListener(settings.tls, server_context(settings.tls))
               if settings.tls.port is not None else None)
    except ConfigError as error:
        print(f"warren: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    _fill_connection_caps(settings.limits)
    os.makedirs(settings.data_dir, exist_ok=True)
    storage = DurableStorage(settings.data_dir, settings.metadata_url)
    broker = Broker(settings.limits, persistence=storage.persistence, version=__version__,
                    loopback_users=settings.loopback_users)
    broker.auth_mechanisms = tuple(settings.auth_mechanisms)
    storage.restore(broker)
    if settings.load_definitions:
        problem = _load_definitions(settings.load_definitions, broker)
        if problem:
            print(f"warren: {problem}", file=sys.stderr)
            storage.close(broker)
            return 2
    committer = GroupCommitter(storage.persistence, storage.apply_changes,
                               storage.sync_stores, storage.maintain_stores)
    server = Server(broker, settings.host, settings.port, committer, settings.alarms,
                    settings.data_dir, control=_control_socket(settings, broker, committer),
                    tls=tls, plain_listener=settings.tls.plain_listener,
                    management=_management_listener(settings, broker, committer))
    try:
        trio.run(server.run)
    except OSError as error:
        logging.getLogger("warren.server").error(
            "event=listen_failed host=%s port=%s tls_port=%s management_port=%s error=%r "
            "hint=%r", settings.host, settings.port, settings.tls.port,
            settings.management.port, error.strerror or str(error),
            "another process uses this port: stop it or pass --port (--tls-port, "
            "--management-port)")
        return 1
    finally:
        storage.close(broker)
    return 0


def _load_definitions(path: str, broker: Broker) -> str | None:
    """Apply the definitions file at `path`; what is wrong with it, or None."""
    try:
        with open(path, "rb") as handle:
            document = json.load(handle)
        definitions.apply(Administration(broker), document)
    except (OSError, ValueError) as error:   # DefinitionsError is a ValueError
        return (f"cannot load definitions from {path}: {error} (fix the file or remove "
                "load_definitions / --load-definitions)")
    logging.getLogger("warren.server").info("event=definitions_loaded path=%s", path)
    return None


def _control_socket(settings, broker: Broker,
                    committer: GroupCommitter) -> ControlSocket | None:
    path = settings.control_socket
    if path is None:
        path = os.path.join(settings.data_dir, CONTROL_SOCKET_NAME)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        logging.getLogger("warren.control").warning(
            "event=control_socket_disabled path=%s reason=%r", path,
            f"Unix socket paths are limited to {MAX_SOCKET_PATH} bytes: set "
            "control_socket to a shorter path")
        return None
    return ControlSocket(broker, committer, path) if path else None


def _management_listener(settings, broker: Broker,
                         committer: GroupCommitter) -> ManagementListener | None:
    port = settings.management.port
    if port == 0:
        return None
    host = settings.management.host or settings.host
    return ManagementListener(broker, committer, host, 0 if port == "auto" else port,
                              settings.management.sample_interval)


def _fill_connection_caps(limits) -> None:
    """Connection caps left at 0 are worked out from the open-file limit (raised to its
    hard limit first), so sockets can never use up the broker's file descriptors."""
    file_limit = raise_file_limit()
    connection_max, unauthenticated_max = default_connection_caps(file_limit)
    limits.connection_max = limits.connection_max or connection_max
    limits.unauthenticated_connection_max = (limits.unauthenticated_connection_max
                                             or unauthenticated_max)
    logging.getLogger("warren.server").debug(
        "event=connection_caps file_limit=%d connection_max=%d "
        "unauthenticated_connection_max=%d", file_limit, limits.connection_max,
        limits.unauthenticated_connection_max)


if __name__ == "__main__":
    sys.exit(main())
