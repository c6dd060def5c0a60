"""Settings for `warren serve`: defaults, overridden by a TOML file, overridden by flags.

Example file:

    host = "0.0.0.0"
    port = 5672
    data_dir = "/var/lib/warren"
    control_socket = "/run/warren/control.sock"   # default: control.sock in data_dir; "" off
    metadata_url = "postgresql+psycopg://warren@localhost/warren"   # default: SQLite
    log_level = "info"
    loopback_users = ["guest"]      # may log in only from 127.0.0.0/8 or ::1; [] for none

    [limits]
    channel_max = 2047
    frame_max = 131072
    heartbeat = 60
    max_message_size = 134217728    # bytes; a larger message is refused with 406

    [alarms]
    memory_high_watermark = 0.4     # fraction of RAM; publishers are blocked above it
    # memory_high_watermark_absolute = 1073741824   # bytes; replaces the fraction
    disk_free_limit = 50000000      # bytes; publishers are blocked below it
    disk_reserve = 16777216         # bytes set aside for acks when the disk fills; 0: none
"""

import tomllib
from dataclasses import dataclass, field, fields

from broker.core.broker import BrokerConfig


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


class ConfigError(Exception):
    """The configuration file is unreadable or names an unknown setting."""


def load_settings(path: str | None, overrides: dict) -> ServeSettings:
    settings = ServeSettings()
    if path:
        _apply_file(settings, path)
    for name, value in overrides.items():
        if value is not None:
            setattr(settings, name, value)
    return settings


def _apply_file(settings: ServeSettings, path: str) -> None:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read configuration file {path}: {error}") from error
    limits = data.pop("limits", {})
    alarms = data.pop("alarms", {})
    _assign(settings, data, path)
    _assign(settings.limits, limits, path + " [limits]")
    _assign(settings.alarms, alarms, path + " [alarms]")
    _require_positive_int(settings.limits.max_message_size, "max_message_size",
                          path + " [limits]")
    _require_user_names(settings.loopback_users, "loopback_users", path)
    if settings.alarms.memory_high_watermark_absolute is not None:
        _require_positive_int(settings.alarms.memory_high_watermark_absolute,
                              "memory_high_watermark_absolute", path + " [alarms]")


def _require_positive_int(value, name: str, where: str) -> None:
    if type(value) is not int or value <= 0:
        raise ConfigError(f"'{name}' in {where} must be a positive number of bytes, "
                          f"got {value!r}")


def _require_user_names(value, name: str, where: str) -> None:
    if type(value) is not list or not all(type(user) is str for user in value):
        raise ConfigError(f"'{name}' in {where} must be a list of user names, e.g. "
                          f'["guest"] or [], got {value!r}')


def _assign(target, values: dict, where: str) -> None:
    known = {f.name: f for f in fields(target)}
    for name, value in values.items():
        if name not in known or name in ("limits", "alarms"):
            raise ConfigError(f"unknown setting '{name}' in {where}; "
                              f"known: {', '.join(sorted(known))}")
        setattr(target, name, value)
