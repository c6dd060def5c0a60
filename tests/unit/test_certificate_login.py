"""The EXTERNAL mechanism in the core (which mechanisms Connection.Start offers, who
logs in with a certificate user) and how the server reads that user from a verified
certificate (common name, subject alternative names), without sockets."""

import ssl

import pytest
from pamqp import commands

from amqp_codec import InboundMethod
from broker.config import TlsSettings
from broker.core.broker import Broker
from broker.core.certificate_login import NO_CERTIFICATE, NO_NAME, TlsPeer
from broker.core.connection import Connection
from broker.server.tls import TlsListener

from core_harness import RecordingTransport, close_code

AFC = {"authentication_failure_close": True}
REFUSED_TEXT = ("ACCESS_REFUSED - Login was refused using authentication mechanism "
                "EXTERNAL. For details see the broker logfile.")


def external_broker(*mechanisms: str) -> Broker:
    broker = Broker()
    broker.auth_mechanisms = mechanisms or ("PLAIN", "AMQPLAIN", "EXTERNAL")
    return broker


def start(broker: Broker, tls: TlsPeer | None, address: str = "127.0.0.1"):
    transport = RecordingTransport()
    connection = Connection(broker, transport, "test", address, tls)
    connection.handshake.start()
    (_, start_method), = transport.methods()
    return connection, transport, start_method.mechanisms.split()


def start_ok(connection, transport, mechanism: str, response: bytes = b"",
             capabilities: dict | None = None) -> list:
    connection.handle(InboundMethod(0, commands.Connection.StartOk(
        client_properties={"capabilities": AFC if capabilities is None else capabilities},
        mechanism=mechanism, response=response)))
    return transport.methods()


def test_external_is_offered_over_tls_when_configured():
    _, _, offered = start(external_broker(), TlsPeer("guest"))
    assert offered == ["PLAIN", "AMQPLAIN", "EXTERNAL"]


def test_external_is_not_offered_over_plain_tcp_even_when_configured():
    _, _, offered = start(external_broker(), None)
    assert offered == ["PLAIN", "AMQPLAIN"]


def test_external_is_not_offered_unless_configured():
    _, _, offered = start(Broker(), TlsPeer("guest"))
    assert offered == ["PLAIN", "AMQPLAIN"]


def test_the_certificate_user_logs_in_without_a_password_and_opens_its_vhost():
    connection, transport, _ = start(external_broker(), TlsPeer("guest"))
    replies = start_ok(connection, transport, "EXTERNAL")
    assert isinstance(replies[0][1], commands.Connection.Tune)
    connection.handle(InboundMethod(0, commands.Connection.TuneOk(2047, 131072, 0)))
    connection.handle(InboundMethod(0, commands.Connection.Open(virtual_host="/")))
    assert isinstance(transport.methods()[0][1], commands.Connection.OpenOk)
    assert connection.user == "guest"


def test_a_loopback_user_logging_in_with_external_still_needs_a_loopback_address():
    """loopback_users applies whatever the mechanism, as RabbitMQ checks it after
    authentication."""
    connection, transport, _ = start(external_broker(), TlsPeer("guest"), "10.1.2.3")
    replies = start_ok(connection, transport, "EXTERNAL")
    assert close_code(replies) == 403
    assert replies[0][1].reply_text == REFUSED_TEXT
    assert connection.user == "" and connection.handshake.login_refused


@pytest.mark.parametrize("peer", [TlsPeer(None, NO_CERTIFICATE), TlsPeer(None, NO_NAME),
                                  TlsPeer("nobody")], ids=["no-certificate", "no-name",
                                                           "unknown-user"])
def test_external_without_a_known_certificate_user_is_refused_as_rabbitmq_refuses(peer):
    connection, transport, _ = start(external_broker(), peer)
    replies = start_ok(connection, transport, "EXTERNAL")
    assert close_code(replies) == 403
    assert replies[0][1].reply_text == REFUSED_TEXT
    assert connection.user == "" and connection.handshake.login_refused


def test_a_refused_external_login_drops_clients_without_authentication_failure_close():
    connection, transport, _ = start(external_broker(), TlsPeer("nobody"))
    assert start_ok(connection, transport, "EXTERNAL", capabilities={}) == []
    assert transport.closed


@pytest.mark.parametrize("mechanism, tls", [("EXTERNAL", None), ("AMQPLAIN", TlsPeer("guest"))],
                         ids=["external-over-plain-tcp", "mechanism-not-configured"])
def test_a_mechanism_not_offered_closes_the_socket_without_a_frame(mechanism, tls):
    broker = external_broker("PLAIN", "EXTERNAL")
    connection, transport, _ = start(broker, tls)
    assert start_ok(connection, transport, mechanism,
                    b"\x05LOGINS\x00\x00\x00\x05guest") == []
    assert transport.closed and connection.user == ""


def test_plain_still_checks_the_password_on_a_tls_connection():
    connection, transport, _ = start(external_broker(), TlsPeer("guest"))
    assert close_code(start_ok(connection, transport, "PLAIN", b"\0guest\0wrong")) == 403


def listener(**settings) -> TlsListener:
    return TlsListener(TlsSettings(port=0, **settings), ssl.create_default_context())


CERTIFICATE = {   # what ssl.SSLObject.getpeercert() gives for a verified certificate
    "subject": ((("organizationName", "Example"),), (("commonName", "alice"),),
                (("commonName", "ops"),)),
    "subjectAltName": (("DNS", "alice.example"), ("email", "alice@example.com"),
                       ("DNS", "second.example"), ("URI", "spiffe://example/alice")),
}


@pytest.mark.parametrize("settings, user", [
    ({}, "alice,ops"),      # every CN, joined by "," as RabbitMQ joins them
    ({"ssl_cert_login_from": "subject_alternative_name"}, "alice.example"),
    ({"ssl_cert_login_from": "subject_alternative_name", "ssl_cert_login_san_index": 1},
     "second.example"),
    ({"ssl_cert_login_from": "subject_alt_name", "ssl_cert_login_san_type": "email"},
     "alice@example.com"),
    ({"ssl_cert_login_from": "subject_alternative_name", "ssl_cert_login_san_type": "uri"},
     "spiffe://example/alice"),
])
def test_the_configured_certificate_field_names_the_user(settings, user):
    assert listener(**settings).peer_of(CERTIFICATE) == TlsPeer(user)


@pytest.mark.parametrize("settings, certificate", [
    ({}, {"subject": ((("organizationName", "Example"),),)}),
    ({"ssl_cert_login_from": "subject_alternative_name", "ssl_cert_login_san_index": 2},
     CERTIFICATE),
    ({"ssl_cert_login_from": "subject_alternative_name"}, {"subject": ()}),
])
def test_a_certificate_without_the_field_names_no_user(settings, certificate):
    assert listener(**settings).peer_of(certificate) == TlsPeer(None, NO_NAME)


# Subjects as ssl.getpeercert() gives them, and the user name RabbitMQ 3.10.8 made of
# the same certificates with ssl_cert_login_from = distinguished_name (from its log).
RABBITMQ_DISTINGUISHED_NAMES = [
    (((("organizationName", "trustme v1.2.1"),),
      (("organizationalUnitName", "Testing cert #PR_iboafOBvIVn4u"),),
      (("commonName", "tls-user"),)),
     "CN=tls-user,OU=Testing cert #PR_iboafOBvIVn4u,O=trustme v1.2.1"),
    (((("organizationName", "Org+Name"),), (("organizationalUnitName", " unit "),),
      (("commonName", ' #lead,co+mma"q<a>;b\\c \u00e9\x01 '),)),
     'CN=\\ #lead\\,co\\+mma\\"q\\<a\\>\\;b\\\\c \\C3\\A9\\01\\ ,'
     'OU=\\ unit\\ ,O=Org\\+Name'),
    (((("organizationName", "Org+Name"),), (("organizationalUnitName", " unit "),),
      (("commonName", "#x"),)),
     "CN=\\#x,OU=\\ unit\\ ,O=Org\\+Name"),
    (((("domainComponent", "com"),),
      (("countryName", "DE"), ("stateOrProvinceName", "Be~rlin\x7f")),
      (("localityName", "L"),), (("title", "T"), ("serialNumber", "42")),
      (("userId", "uid1"),), (("emailAddress", "a@b.c"),),
      (("surname", "S"), ("givenName", "G")), (("pseudonym", "P"),),
      (("streetAddress", "Main St"),), (("1.2.3.4.5", "odd"),), (("commonName", "multi"),)),
     "CN=multi,1.2.3.4.5=odd,2.5.4.9=Main St,PSEUDONYM=P,SN=S+GIVENNAME=G,"
     "EMAILADDRESS=a@b.c,UID=uid1,TITLE=T+SERIALNUMBER=42,L=L,C=DE+ST=Be\\7Erlin\\7F,"
     "DC=com"),
]


@pytest.mark.parametrize("subject, name", RABBITMQ_DISTINGUISHED_NAMES)
def test_the_distinguished_name_is_written_as_rabbitmq_writes_it(subject, name):
    peer = listener(ssl_cert_login_from="distinguished_name").peer_of({"subject": subject})
    assert peer == TlsPeer(name)


def test_no_certificate_names_no_user():
    assert listener().peer_of(None) == TlsPeer(None, NO_CERTIFICATE)
