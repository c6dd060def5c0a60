"""The upgrade lint: what each vhost did that a newer RabbitMQ line refuses or treats
differently, or that its own line's denied deprecated features changed, recorded as it
happens.

One note per (vhost, topic), the first time: a topic is a deprecated feature's name
(rabbitmq_lines.FEATURES) or a difference between lines that is not a deprecated feature
(a quorum queue's default delivery limit). Each new note is logged once as a warning, and
the pytest plugin names the test whose vhost made each note in its terminal summary.
Every use of a deprecated feature is also counted as used, noted or not: the management
API lists those (`GET /api/deprecated-features/used`).
"""

import logging
from dataclasses import dataclass


log = logging.getLogger("warren.upgrade_lint")

# Topics that are differences between lines, not deprecated features.
QUORUM_DELIVERY_LIMIT = "quorum_delivery_limit"


@dataclass(frozen=True)
class LintNote:
    vhost: str
    topic: str
    text: str


class UpgradeLint:
    """The notes of every vhost of a broker (see the module's docstring)."""

    def __init__(self) -> None:
        self.notes: dict[tuple[str, str], LintNote] = {}
        # The deprecated features each vhost used, noted or not (RabbitMQ's "used").
        self.features_used: dict[str, set[str]] = {}

    def used(self, vhost: str, feature: str) -> None:
        self.features_used.setdefault(vhost, set()).add(feature)

    def note(self, vhost: str, topic: str, text: str) -> None:
        key = (vhost, topic)
        if key in self.notes:
            return
        self.notes[key] = LintNote(vhost, topic, text)
        log.warning("event=upgrade_lint vhost=%r topic=%s %s", vhost, topic, text)

    def used_features(self) -> list[str]:
        """The deprecated features some existing vhost used, by name."""
        return sorted(set().union(*self.features_used.values()))

    def of_vhost(self, vhost: str) -> list[LintNote]:
        return [note for (name, _topic), note in self.notes.items() if name == vhost]

    def forget_vhost(self, vhost: str) -> None:
        """The vhost is deleted: its notes go with it."""
        for key in [key for key in self.notes if key[0] == vhost]:
            del self.notes[key]
        self.features_used.pop(vhost, None)
