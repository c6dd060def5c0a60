"""The EXTERNAL SASL mechanism, as RabbitMQ's rabbitmq_auth_mechanism_ssl plugin has it:
a client on a TLS connection logs in as the user its verified certificate names, with
no password.

The server reads the certificate during the TLS handshake (broker/server/tls.py) and
gives the connection a `TlsPeer`; the core decides. EXTERNAL is offered in
Connection.Start only on TLS connections and only when `auth_mechanisms` lists it; the
login succeeds when the certificate names a user and that user exists, and is refused
as a wrong password is otherwise."""

from dataclasses import dataclass

EXTERNAL = "EXTERNAL"

# Why a TLS connection has no certificate user (RabbitMQ's words, for the log).
NO_CERTIFICATE = "connection peer presented no TLS (x.509) certificate"
NO_NAME = "no name found"


@dataclass(frozen=True)
class TlsPeer:
    """What the TLS handshake told about the client: the user name in the certificate
    field the configuration names (None: there is none, and `missing` says why)."""

    user: str | None
    missing: str = ""


def offered_mechanisms(configured, tls: TlsPeer | None) -> list[str]:
    """The mechanisms Connection.Start offers: the configured ones, EXTERNAL only over
    TLS (RabbitMQ offers it only on TLS connections too)."""
    return [name for name in configured if name != EXTERNAL or tls is not None]
