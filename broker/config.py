"""Settings for `warren serve`: defaults, overridden by a TOML file, overridden by flags.

Example file:

    host = "0.0.0.0"
    port = 5672
    data_dir = "/var/lib/warren"
    control_socket = "/run/warren/control.sock"   # default: control.sock in data_dir; "" off
    metadata_url = "postgresql+psycopg://warren@localhost/warren"   # default: SQLite
    log_level = "info"
    loopback_users = ["guest"]      # may log in only from 127.0.0.0/8 or ::1; [] for none
    load_definitions = "/etc/warren/definitions.json"   # RabbitMQ's JSON, applied at boot
    rabbitmq = "4.3"                # the RabbitMQ line to behave as: "3.10", "4.0", "4.3"
    deprecated_features.permit.global_qos = true   # RabbitMQ's keys; default: the line's

    [limits]
    channel_max = 2047
    frame_max = 131072
    heartbeat = 60
    max_message_size = 134217728    # bytes; a larger message is refused with 406
    consumer_timeout = 1800000      # ms a delivery may stay unacked (406); 0: no timeout

    [alarms]
    memory_high_watermark = 0.4     # fraction of RAM; publishers are blocked above it
    # memory_high_watermark_absolute = 1073741824   # bytes; replaces the fraction
    disk_free_limit = 50000000      # bytes; publishers are blocked below it
    disk_reserve = 16777216         # bytes set aside for acks when the disk fills; 0: none

    auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]   # default: PLAIN and AMQPLAIN

    [tls]
    port = 5671                     # the amqps listener; off unless a port is given
    certfile = "/etc/warren/server.pem"
    keyfile = "/etc/warren/server.key"
    cacertfile = "/etc/warren/ca.pem"
    verify = "verify_peer"          # or "verify_none" (the default)
    fail_if_no_peer_cert = true
    plain_listener = false          # amqps only (default true: both listeners)
    ssl_cert_login_from = "common_name"   # the EXTERNAL user; or "distinguished_name"...

    [management]
    port = 15672                    # the HTTP API, metrics and web UI; 0: off
    host = "127.0.0.1"              # default: the AMQP host
    sample_interval = 5.0           # seconds between message-rate samples
"""

import tomllib
from dataclasses import dataclass, field, fields

from broker.core.broker import BrokerConfig
from broker.core.rabbitmq_lines import DEFAULT_LINE, Profile, UnknownLine, make_profile


@dataclass
class AlarmLimits:
    """The `[alarms]` settings (the server's ResourceAlarm applies them)."""

    memory_high_watermark: float = 0.4      # fraction of the machine's RAM
    memory_high_watermark_absolute: int | None = None   # bytes; replaces the fraction
    disk_free_limit: int = 50_000_000       # bytes that must stay free (RabbitMQ: 50 MB)
    disk_reserve: int = 16 * 1024 * 1024    # bytes set aside for acks on a full disk

    def memory_limit(self, total_memory: int) -> int:
        """Bytes the broker may hold on a machine with `total_memory` bytes of RAM."""
        if self.memory_high_watermark_absolute is not None:
            return self.memory_high_watermark_absolute
        return int(self.memory_high_watermark * total_memory)


TLS_VERIFY_MODES = ("verify_none", "verify_peer")
CERT_LOGIN_SOURCES = ("common_name", "distinguished_name", "subject_alternative_name",
                      "subject_alt_name")
CERT_LOGIN_SAN_TYPES = ("dns", "email", "uri")
AUTH_MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")


@dataclass
class TlsSettings:
    """The `[tls]` settings: the amqps listener (off while `port` is None) and, for the
    EXTERNAL mechanism, which field of the client's certificate names its user (the
    server's broker/server/tls.py applies them)."""

    port: int | None = None                 # 5671 by convention
    certfile: str = ""                      # the server's certificate (PEM), chain after it
    keyfile: str = ""                       # its private key (PEM)
    cacertfile: str = ""                    # CAs whose client certificates are accepted
    verify: str = "verify_none"             # "verify_peer": ask for a client certificate
    fail_if_no_peer_cert: bool = False      # with verify_peer: refuse clients without one
    plain_listener: bool = True             # False: amqps only, no plain AMQP port
    ssl_cert_login_from: str = "common_name"   # or "distinguished_name", a SAN
    ssl_cert_login_san_type: str = "dns"    # "dns", "email" or "uri"
    ssl_cert_login_san_index: int = 0       # which SAN of that type (0: the first)


MANAGEMENT_PORT = 15672   # RabbitMQ's management port
FREE_PORT = "auto"   # --management-port auto: a free port, logged as event=management_listening


@dataclass
class ManagementSettings:
    """The `[management]` settings: the HTTP listener of the management API, the
    Prometheus metrics and the web UI (broker/server/management)."""

    port: int | str = MANAGEMENT_PORT   # 0: no listener; "auto": a free port
    host: str | None = None             # None: the AMQP host
    sample_interval: float = 5.0        # seconds between message-rate samples


@dataclass
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 5672
    data_dir: str = "./data"
    metadata_url: str | None = None
    control_socket: str | None = None   # None: <data_dir>/control.sock; "": no socket
    log_level: str = "info"
    loopback_users: list[str] = field(default_factory=lambda: ["guest"])
    limits: BrokerConfig = field(default_factory=BrokerConfig)
    alarms: AlarmLimits = field(default_factory=AlarmLimits)
    tls: TlsSettings = field(default_factory=TlsSettings)
    management: ManagementSettings = field(default_factory=ManagementSettings)
    auth_mechanisms: list = field(default_factory=lambda: ["PLAIN", "AMQPLAIN"])
    load_definitions: str | None = None   # a definitions file applied at boot
    rabbitmq: str = DEFAULT_LINE.name     # the RabbitMQ line it behaves as
    # RabbitMQ's deprecated_features.permit.<feature> keys: {"permit": {feature: bool}}
    deprecated_features: dict = field(default_factory=dict)

    def profile(self) -> Profile:
        """The RabbitMQ line and deprecated-feature permits it runs under (ConfigError
        for an unknown line or feature)."""
        permits = self.deprecated_features.get("permit", {}) \
            if isinstance(self.deprecated_features, dict) else None
        unknown = set(self.deprecated_features) - {"permit"} \
            if isinstance(self.deprecated_features, dict) else {"?"}
        if unknown or not isinstance(permits, dict):
            raise ConfigError("'deprecated_features' takes only permit.<feature> = "
                              f"true/false keys, got {self.deprecated_features!r}")
        try:
            return make_profile(str(self.rabbitmq), permits)
        except UnknownLine as error:
            raise ConfigError(str(error)) from None


class ConfigError(Exception):
    """The configuration file is unreadable or names an unknown setting."""


def load_settings(path: str | None, overrides: dict) -> ServeSettings:
    """Overrides are flags: ServeSettings fields, `tls_port` for [tls] port and
    `management_port` for [management] port."""
    settings = ServeSettings()
    if path:
        _apply_file(settings, path)
    for name, value in overrides.items():
        if value is None:
            continue
        if name == "tls_port":
            settings.tls.port = value
        elif name == "management_port":
            settings.management.port = value
        else:
            setattr(settings, name, value)
    _check_auth_mechanisms(settings.auth_mechanisms)
    settings.profile()
    _check_tls(settings.tls)
    _check_management(settings.management)
    return settings


def _apply_file(settings: ServeSettings, path: str) -> None:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read configuration file {path}: {error}") from error
    limits = data.pop("limits", {})
    alarms = data.pop("alarms", {})
    tls = data.pop("tls", {})
    management = data.pop("management", {})
    _assign(settings, data, path)
    _check_limits(limits, path + " [limits]")
    _assign(settings.limits, limits, path + " [limits]")
    _assign(settings.alarms, alarms, path + " [alarms]")
    _assign(settings.tls, tls, path + " [tls]")
    _assign(settings.management, management, path + " [management]")
    _require_user_names(settings.loopback_users, "loopback_users", path)
    if settings.alarms.memory_high_watermark_absolute is not None:
        _require_positive_int(settings.alarms.memory_high_watermark_absolute,
                              "memory_high_watermark_absolute", path + " [alarms]")


def _check_limits(limits: dict, where: str) -> None:
    """The [limits] values as the file gives them, before they are set on the core's
    BrokerConfig: each of the type its field declares (a float where an integer is
    meant, or a string, is a ConfigError here, not a failure later in the core)."""
    if "max_message_size" in limits:
        _require_positive_int(limits["max_message_size"], "max_message_size", where)
    if "consumer_timeout" in limits:
        _require_milliseconds(limits["consumer_timeout"], "consumer_timeout", where)
    declared = {f.name: f.type for f in fields(BrokerConfig)}
    for name, value in limits.items():
        if declared.get(name) is int and type(value) is not int:
            raise ConfigError(f"'{name}' in {where} must be an integer, got {value!r}")
        if declared.get(name) is float and type(value) not in (int, float):
            raise ConfigError(f"'{name}' in {where} must be a number, got {value!r}")


def _require_positive_int(value, name: str, where: str) -> None:
    if type(value) is not int or value <= 0:
        raise ConfigError(f"'{name}' in {where} must be a positive number of bytes, "
                          f"got {value!r}")


def _require_milliseconds(value, name: str, where: str) -> None:
    if type(value) is not int or value < 0:
        raise ConfigError(f"'{name}' in {where} must be a number of milliseconds (0 for "
                          f"no timeout), got {value!r}")


def _require_user_names(value, name: str, where: str) -> None:
    if type(value) is not list or not all(type(user) is str for user in value):
        raise ConfigError(f"'{name}' in {where} must be a list of user names, e.g. "
                          f'["guest"] or [], got {value!r}')


def _assign(target, values: dict, where: str) -> None:
    known = {f.name: f for f in fields(target)}
    for name, value in values.items():
        if name not in known or name in ("limits", "alarms", "tls", "management"):
            raise ConfigError(f"unknown setting '{name}' in {where}; "
                              f"known: {', '.join(sorted(known))}")
        setattr(target, name, value)


def _check_auth_mechanisms(mechanisms) -> None:
    if (not isinstance(mechanisms, list) or not mechanisms
            or any(name not in AUTH_MECHANISMS for name in mechanisms)):
        raise ConfigError(f"'auth_mechanisms' must be a list of {', '.join(AUTH_MECHANISMS)}"
                          f", got {mechanisms!r}")


def _check_management(management: ManagementSettings) -> None:
    port = management.port
    if port != FREE_PORT and (type(port) is not int or not 0 <= port <= 65535):
        raise ConfigError(f"the management port must be a port number (0: no management "
                          f"listener) or \"{FREE_PORT}\", got {port!r}")
    if management.host is not None and type(management.host) is not str:
        raise ConfigError(f"'host' in [management] must be an address, "
                          f"got {management.host!r}")
    interval = management.sample_interval
    if type(interval) not in (int, float) or not 0.05 <= interval <= 3600:
        raise ConfigError(f"'sample_interval' in [management] must be a number of seconds "
                          f"from 0.05 to 3600 (RabbitMQ samples every 5), got {interval!r}")


def management_port(text: str) -> int | str:
    """The --management-port flag's value: a port number or "auto"."""
    return text if text == FREE_PORT else int(text)


def _check_tls(tls: TlsSettings) -> None:
    """The [tls] values that can be checked without reading files (the server checks
    the certificate and key files when it loads them)."""
    where = "[tls]"
    if tls.port is None:
        if not tls.plain_listener:
            raise ConfigError(f"'plain_listener = false' in {where} needs a TLS 'port': "
                              "without either there is nothing to listen on")
        return
    if type(tls.port) is not int or not 0 <= tls.port <= 65535:
        raise ConfigError(f"'port' in {where} must be a port number, got {tls.port!r}")
    if not tls.certfile or not tls.keyfile:
        raise ConfigError(f"the TLS listener (port {tls.port}) needs 'certfile' and "
                          f"'keyfile' in {where}")
    _require_choice(tls.verify, "verify", TLS_VERIFY_MODES)
    _require_choice(tls.ssl_cert_login_from, "ssl_cert_login_from", CERT_LOGIN_SOURCES)
    _require_choice(tls.ssl_cert_login_san_type, "ssl_cert_login_san_type",
                    CERT_LOGIN_SAN_TYPES)
    for name in ("fail_if_no_peer_cert", "plain_listener"):
        if type(getattr(tls, name)) is not bool:
            raise ConfigError(f"'{name}' in {where} must be true or false, "
                              f"got {getattr(tls, name)!r}")
    index = tls.ssl_cert_login_san_index
    if type(index) is not int or index < 0:
        raise ConfigError(f"'ssl_cert_login_san_index' in {where} must be 0 or more, "
                          f"got {index!r}")
    if tls.verify == "verify_peer" and not tls.cacertfile:
        raise ConfigError(f"'verify = \"verify_peer\"' in {where} needs 'cacertfile': "
                          "the CAs whose client certificates are accepted")
    if tls.fail_if_no_peer_cert and tls.verify != "verify_peer":
        raise ConfigError(f"'fail_if_no_peer_cert = true' in {where} needs "
                          "'verify = \"verify_peer\"' (as in RabbitMQ)")


def _require_choice(value, name: str, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"'{name}' in [tls] must be one of {', '.join(choices)}, "
                          f"got {value!r}")
