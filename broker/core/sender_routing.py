"""Sender-selected distribution, as RabbitMQ 3.10 does it: the CC and BCC headers of a
published message (arrays of long strings) name more routing keys the message is routed
with, on the same exchange. BCC is taken out of the headers before the message is
routed or stored; CC stays. Elements that are not strings are ignored; a CC or BCC
header that is not an array refuses the publish (406, RabbitMQ's text).
"""

from amqp_codec import headers_entries, replace_properties

from .errors import ChannelError, precondition_failed
from .exchange import field_type_name
from .message import Message, SenderRoutedMessage

CC = "CC"
BCC = "BCC"


def sender_routed(message: Message) -> Message:
    """The message with the routing keys its CC and BCC headers add, and its BCC header
    taken out; `message` itself when it has neither header. Raises ChannelError."""
    entries = headers_entries(message.properties)
    cc = _first_entry(entries, CC)
    bcc = _first_entry(entries, BCC)
    if cc is None and bcc is None:
        return message
    routes = _routes(cc) + _routes(bcc)
    properties = message.properties
    if bcc is not None:
        headers = b"".join(entry[2] for entry in entries if entry is not bcc)
        properties = replace_properties(properties, headers=headers)
    if not routes:
        return Message(message.exchange, message.routing_key, properties, message.body)
    return SenderRoutedMessage(message.exchange, message.routing_key, properties,
                               message.body, tuple(routes))


def cc_routing_keys(entries: list) -> list[str]:
    """The routing keys a message's CC header names (its header entries as
    amqp_codec.headers_entries gives them); none when the header is not an array."""
    cc = _first_entry(entries, CC)
    return [] if cc is None or not isinstance(cc[1], list) else _routes(cc)


def _first_entry(entries: list, name: str):
    """The first header of that name, as RabbitMQ looks a header up."""
    return next((entry for entry in entries if entry[0] == name), None)


def _routes(entry) -> list[str]:
    if entry is None:
        return []
    name, value, _raw = entry
    if not isinstance(value, list):
        raise _unacceptable(name, value)
    return [route for route in value if isinstance(route, str)]


def _unacceptable(name: str, value) -> ChannelError:
    return precondition_failed(
        f'invalid message: {{unacceptable_type_in_header,"{name}",'
        f"{field_type_name(value)}}}")
