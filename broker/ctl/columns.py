"""rabbitmqctl's info items (the columns of its list_* verbs) and where each is found
in the management API's objects."""

from collections.abc import Callable
from typing import Any

Column = Callable[[dict], object]


def field(path: str) -> Column:
    """The value at a dotted path ("queue.name"); None when the API leaves it out."""
    keys = path.split(".")

    def value_of(item: dict) -> Any:
        found: Any = item
        for key in keys:
            if not isinstance(found, dict):
                return None
            found = found.get(key)
        return found
    return value_of


def same_names(*names: str) -> dict[str, Column]:
    return {name: field(name) for name in names}


QUEUES = same_names(
    "name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "policy",
    "exclusive_consumer_tag", "messages_ready", "messages_unacknowledged", "messages",
    "messages_ready_ram", "messages_unacknowledged_ram", "messages_ram",
    "messages_persistent", "message_bytes", "message_bytes_ready",
    "message_bytes_unacknowledged", "message_bytes_ram", "message_bytes_persistent",
    "head_message_timestamp", "consumers", "consumer_utilisation", "memory", "state",
    "type", "leader", "members", "online") | {
    "owner_pid": field("owner_pid_details.name")}

EXCHANGES = same_names("name", "vhost", "type", "durable", "auto_delete", "internal",
                       "arguments", "policy")

BINDINGS = {
    "source_name": field("source"),
    "source_kind": lambda binding: "exchange",
    "destination_name": field("destination"),
    "destination_kind": field("destination_type"),
    "routing_key": field("routing_key"),
    "arguments": field("arguments"),
    "vhost": field("vhost"),
}

CONNECTIONS = same_names(
    "name", "user", "vhost", "host", "port", "peer_host", "peer_port", "state",
    "channels", "protocol", "auth_mechanism", "ssl", "timeout", "frame_max",
    "channel_max", "client_properties", "recv_oct", "send_oct", "recv_cnt", "send_cnt",
    "connected_at", "type") | {"pid": field("name")}

CHANNELS = same_names(
    "name", "user", "vhost", "number", "consumer_count", "messages_unacknowledged",
    "messages_unconfirmed", "messages_uncommitted", "acks_uncommitted", "prefetch_count",
    "global_prefetch_count", "transactional", "confirm", "state") | {
    "pid": field("name"), "connection": field("connection_details.name")}

CONSUMERS = {
    "queue_name": field("queue.name"),
    "channel_pid": field("channel_details.name"),
    "consumer_tag": field("consumer_tag"),
    "ack_required": field("ack_required"),
    "prefetch_count": field("prefetch_count"),
    "active": field("active"),
    "activity_status": field("activity_status"),
    "exclusive": field("exclusive"),
    "arguments": field("arguments"),
}

USERS = {"user": field("name"), "tags": field("tags")}

VHOSTS = same_names("name", "description", "tags", "tracing", "default_queue_type")

PERMISSIONS = same_names("user", "configure", "write", "read")

POLICIES = same_names("vhost", "name", "pattern", "apply-to", "definition", "priority")
