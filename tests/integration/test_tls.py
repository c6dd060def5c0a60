"""amqps: pika over TLS with PLAIN and EXTERNAL, certificates refused on either side,
TLS versions, the handshake limits, and clients on the wrong port.

Certificates are made by the test itself (tls_support.make_pki, trustme). The shared
TLS broker of this module verifies client certificates against the test CA but does not
require one (verify_peer, fail_if_no_peer_cert off) and offers EXTERNAL (common name).
Tests that need another configuration start a dedicated Warren.

Against RabbitMQ: the tests that use the shared TLS broker run against a node set up
with the same certificates and settings (they are what RabbitMQ answers too):

    python tests/support/tls_support.py /tmp/pki      # the certificates
    # rabbitmq.conf: listeners.tcp.default = 5683, listeners.ssl.default = 5684,
    # ssl_options.{cacertfile,certfile,keyfile} = /tmp/pki/{ca,server}.pem, server.key,
    # ssl_options.verify = verify_peer, ssl_options.fail_if_no_peer_cert = false,
    # ssl_options.versions.1 = tlsv1.3, ssl_options.versions.2 = tlsv1.2,
    # auth_mechanisms.1 = PLAIN, .2 = AMQPLAIN, .3 = EXTERNAL,
    # ssl_cert_login_from = common_name; plugin rabbitmq_auth_mechanism_ssl enabled
    rabbitmqctl add_user tls-user tls-secret; rabbitmqctl set_permissions tls-user '.*' '.*' '.*'
    WARREN_TEST_TLS_BROKER=127.0.0.1:5683:5684 WARREN_TEST_TLS_PKI=/tmp/pki pytest -k shared ...
"""

import os
import socket
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pika
import pika.exceptions
import pytest
from cryptography import x509

from broker.core.passwords import SHA256_ALGORITHM, hash_password
from tests.support.broker_process import BrokerProcess
from tests.support.bystander import RunningBystander
from tests.support.java_support import java_programs  # noqa: F401  (fixture)
from tests.support.raw_amqp import (PIKA_CAPABILITIES, PROTOCOL_HEADER, PeerClosed, RawAmqpClient,
                                    read_socket_until_closed, start_ok_frame)
from storage.metadata import MetadataStore, PasswordHash
from tests.support.tls_support import SERVER_NAME, client_context, make_pki

DEADLINE = 30.0   # the longest any single wait may take on a loaded machine
TLS_USER, TLS_PASSWORD = "tls-user", "tls-secret"
REFUSED_TEXT = ("ACCESS_REFUSED - Login was refused using authentication mechanism "
                "EXTERNAL. For details see the broker logfile.")
REFUSED = (ssl.SSLError, PeerClosed, ConnectionError)   # how a refused handshake shows


@dataclass
class TlsBroker:
    host: str
    port: int        # plain AMQP
    tls_port: int
    pki: Path
    warren: BrokerProcess | None = None   # None: an external broker (RabbitMQ)


def warren_unless_tls_broker(test):
    """Tests of the shared TLS broker run against WARREN_TEST_TLS_BROKER when it names
    one (a RabbitMQ node set up as the module docstring says); otherwise they start a
    Warren of their own, and are Warren-only."""
    if os.environ.get("WARREN_TEST_TLS_BROKER"):
        return test
    return pytest.mark.warren_only(
        "a Warren TLS broker of its own (set WARREN_TEST_TLS_BROKER to run it elsewhere)")(test)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    existing = os.environ.get("WARREN_TEST_TLS_PKI")
    if existing:
        return Path(existing)
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_config(pki: Path, tmp_path: Path, tls: str = "", top: str = "",
               server: str = "server") -> str:
    """A configuration file: the [tls] listener with the test CA, plus `tls` lines."""
    path = tmp_path / f"warren-{uuid.uuid4().hex[:8]}.toml"
    path.write_text(
        'auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]\n' + top
        + f'[tls]\ncertfile = "{pki / (server + ".pem")}"\n'
        f'keyfile = "{pki / (server + ".key")}"\ncacertfile = "{pki / "ca.pem"}"\n'
        f'verify = "verify_peer"\n{tls}')
    return str(path)


def seed_users(data_dir: Path, *names: str) -> str:
    """A data directory whose metadata has `names` (password TLS_PASSWORD, full access
    to "/") beside guest."""
    data_dir.mkdir(parents=True, exist_ok=True)
    guest = PasswordHash(hash_password("guest"), SHA256_ALGORITHM)
    with MetadataStore.open(None, str(data_dir), guest) as store:
        for name in names:
            store.add_user(name, PasswordHash(hash_password(TLS_PASSWORD), SHA256_ALGORITHM))
            store.set_permissions(name, "/")
    return str(data_dir)


def start_warren(pki: Path, tmp_path: Path, tls: str = "", top: str = "",
                 server: str = "server", users=(TLS_USER,),
                 plain_listener: bool = True) -> TlsBroker:
    process = BrokerProcess(
        data_dir=seed_users(tmp_path / f"data-{uuid.uuid4().hex[:8]}", *users),
        extra_args=("--tls-port", "0", "--config",
                    tls_config(pki, tmp_path, tls, top, server)),
        plain_listener=plain_listener).start()
    return TlsBroker(process.host, process.port, process.tls_port, pki, process)


@pytest.fixture(scope="module")
def shared(pki, tmp_path_factory):
    """The module's TLS broker (verify_peer, no certificate required, EXTERNAL)."""
    external = os.environ.get("WARREN_TEST_TLS_BROKER")
    if external:
        host, port, tls_port = external.rsplit(":", 2)
        yield TlsBroker(host, int(port), int(tls_port), pki)
        return
    broker = start_warren(pki, tmp_path_factory.mktemp("tls-shared"))
    yield broker
    broker.warren.kill()


@pytest.fixture
def dedicated(pki, tmp_path):
    """Start Warren brokers of the test's own configuration (start_warren's arguments)."""
    started = []

    def start(**options) -> TlsBroker:
        broker = start_warren(pki, tmp_path, **options)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.warren.kill()


def tls_connection(broker: TlsBroker, context: ssl.SSLContext,
                   credentials=None) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=broker.host, port=broker.tls_port,
        ssl_options=pika.SSLOptions(context, SERVER_NAME),
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, heartbeat=0, socket_timeout=DEADLINE,
        stack_timeout=DEADLINE, blocked_connection_timeout=DEADLINE))


def raw_tls_client(broker: TlsBroker, context: ssl.SSLContext) -> RawAmqpClient:
    """A raw AMQP client over TLS (the handshake done; ssl.SSLError when refused)."""
    client = RawAmqpClient(broker.host, broker.tls_port, timeout=DEADLINE)
    try:
        client.sock = context.wrap_socket(client.sock, server_hostname=SERVER_NAME)
    except BaseException:
        client.close()
        raise
    return client


def offered_mechanisms(broker: TlsBroker, context: ssl.SSLContext) -> set[str]:
    """The mechanisms of Connection.Start over TLS. A client certificate the broker
    refuses fails here at the latest (TLS 1.3 refuses it after the client's side of the
    handshake is done)."""
    with raw_tls_client(broker, context) as client:
        return set(client.start_handshake().mechanisms.split())


def round_trip(connection: pika.BlockingConnection, bodies: list[bytes],
               user_id: str | None = None) -> list[bytes]:
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.confirm_delivery()
    properties = pika.BasicProperties(user_id=user_id)
    for body in bodies:
        channel.basic_publish("", queue, body, properties, mandatory=True)
    received = []
    for method, _properties, body in channel.consume(queue, auto_ack=True,
                                                     inactivity_timeout=DEADLINE):
        assert method is not None, f"got {len(received)} of {len(bodies)} messages"
        received.append(body)
        if len(received) == len(bodies):
            break
    channel.cancel()
    return received


def messages() -> list[bytes]:
    """Small messages and ones larger than a TLS record and a frame (several records,
    several frames each)."""
    return ([f"m{index}".encode() for index in range(500)]
            + [os.urandom(size) for size in (16_384, 200_000, 1_500_000)])


# -- the shared TLS broker: Warren, or RabbitMQ with WARREN_TEST_TLS_BROKER --------------

@warren_unless_tls_broker
def test_shared_pika_plain_login_over_tls_without_a_client_certificate(shared):
    bodies = messages()
    with tls_connection(shared, client_context(shared.pki)) as connection:
        assert round_trip(connection, bodies) == bodies


@warren_unless_tls_broker
def test_shared_pika_external_logs_in_the_user_of_the_certificate(shared):
    external = pika.credentials.ExternalCredentials()
    with tls_connection(shared, client_context(shared.pki, "guest"), external) as connection:
        assert round_trip(connection, [b"as guest"], user_id="guest") == [b"as guest"]
    with tls_connection(shared, client_context(shared.pki, TLS_USER), external) as connection:
        # user_id must be the login user: this connection is tls-user's, not guest's.
        assert round_trip(connection, [b"as tls-user"], user_id=TLS_USER) == [b"as tls-user"]
        channel = connection.channel()
        channel.basic_publish("", "nowhere", b"x", pika.BasicProperties(user_id="guest"))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.exchange_declare("amq.direct", passive=True)
        assert closed.value.reply_code == 406
        assert "authenticated user was 'tls-user'" in closed.value.reply_text


@warren_unless_tls_broker
def test_shared_external_is_offered_over_tls_only(shared):
    assert offered_mechanisms(shared, client_context(shared.pki)) == {
        "PLAIN", "AMQPLAIN", "EXTERNAL"}
    with RawAmqpClient(shared.host, shared.port, timeout=DEADLINE) as client:
        assert set(client.start_handshake().mechanisms.split()) == {"PLAIN", "AMQPLAIN"}


@warren_unless_tls_broker
@pytest.mark.parametrize("certificate", [None, "nobody"],
                         ids=["no-client-certificate", "no-such-user"])
def test_shared_external_without_a_known_user_is_refused_with_403(shared, certificate):
    with raw_tls_client(shared, client_context(shared.pki, certificate)) as client:
        client.start_handshake()
        client.send_raw(start_ok_frame("EXTERNAL", b"", {"capabilities": PIKA_CAPABILITIES}))
        close = client.wait_for_connection_close(timeout=DEADLINE)
        assert (close.reply_code, close.reply_text) == (403, REFUSED_TEXT)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        tls_connection(shared, client_context(shared.pki, certificate),
                       pika.credentials.ExternalCredentials())


@warren_unless_tls_broker
def test_shared_external_over_plain_tcp_is_dropped_without_a_frame(shared):
    with RawAmqpClient(shared.host, shared.port, timeout=DEADLINE) as client:
        client.start_handshake()
        client.send_raw(start_ok_frame("EXTERNAL", b"", {"capabilities": PIKA_CAPABILITIES}))
        assert client.read_until_closed(timeout=DEADLINE) == []


@warren_unless_tls_broker
def test_shared_a_client_that_trusts_another_ca_refuses_the_broker(shared):
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        raw_tls_client(shared, client_context(shared.pki, ca="other-ca.pem"))


@warren_unless_tls_broker
@pytest.mark.parametrize("certificate", ["expired-guest", "foreign-guest"])
def test_shared_verify_peer_refuses_an_expired_or_foreign_client_certificate(shared,
                                                                             certificate):
    with pytest.raises(REFUSED):
        offered_mechanisms(shared, client_context(shared.pki, certificate))
    # The same name in a valid certificate of the trusted CA is accepted.
    assert "EXTERNAL" in offered_mechanisms(shared, client_context(shared.pki, "guest"))


@warren_unless_tls_broker
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_shared_tls_1_2_and_1_3_are_served(shared, version):
    context = client_context(shared.pki, version=version)
    with raw_tls_client(shared, context) as client:
        assert client.sock.version() == version.name.replace("_", ".")
        assert "PLAIN" in client.start_handshake().mechanisms.split()


@warren_unless_tls_broker
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_shared_tls_1_1_is_refused(shared):
    context = client_context(shared.pki, version=ssl.TLSVersion.TLSv1_1)
    with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION|protocol version"):
        raw_tls_client(shared, context)


@warren_unless_tls_broker
def test_shared_java_client_over_tls_with_plain_and_external(shared, java_programs):
    tls_address = SimpleNamespace(host=shared.host, port=shared.tls_port)
    run = java_programs.run("TlsClient", tls_address, shared.pki, timeout=90)
    assert run["plain_round_trip"] == "ok"
    assert run["tls12_round_trip"] == "ok"
    assert run["external_round_trip"] == "ok"     # user_id guest: logged in as guest
    assert run["external_without_certificate"] == "AuthenticationFailureException"
    assert REFUSED_TEXT in run["external_without_certificate_text"]


# -- dedicated Warren brokers ---------------------------------------------------------

@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_fail_if_no_peer_cert_refuses_a_client_without_a_certificate(dedicated):
    broker = dedicated(tls="fail_if_no_peer_cert = true\n")
    with pytest.raises(REFUSED):
        offered_mechanisms(broker, client_context(broker.pki))
    external = pika.credentials.ExternalCredentials()
    with tls_connection(broker, client_context(broker.pki, "guest"), external) as connection:
        assert round_trip(connection, [b"with a certificate"]) == [b"with a certificate"]


@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_a_client_rejects_an_expired_server_certificate(dedicated):
    broker = dedicated(server="expired-server")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
        raw_tls_client(broker, client_context(broker.pki))
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
        tls_connection(broker, client_context(broker.pki))
    assert broker.warren.process.poll() is None


@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_tls_only_broker_logs_in_the_subject_alternative_name(dedicated):
    user = "tls-user@example.test"
    broker = dedicated(tls='plain_listener = false\n'
                           'ssl_cert_login_from = "subject_alternative_name"\n'
                           'ssl_cert_login_san_type = "email"\n',
                       users=(user,), plain_listener=False)
    assert not any("event=listening " in line for line in broker.warren.log_lines)
    external = pika.credentials.ExternalCredentials()
    with tls_connection(broker, client_context(broker.pki, TLS_USER), external) as connection:
        assert round_trip(connection, [b"by SAN"], user_id=user) == [b"by SAN"]
    # guest's certificate has no e-mail name: no user, refused.
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        tls_connection(broker, client_context(broker.pki, "guest"), external)


@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_distinguished_name_login_as_rabbitmqs_default(dedicated, pki):
    certificate = x509.load_pem_x509_certificate((pki / f"{TLS_USER}.pem").read_bytes())
    user = certificate.subject.rfc4514_string()    # "CN=tls-user,OU=...,O=trustme ..."
    broker = dedicated(tls='ssl_cert_login_from = "distinguished_name"\n', users=(user,))
    external = pika.credentials.ExternalCredentials()
    with tls_connection(broker, client_context(broker.pki, TLS_USER), external) as connection:
        assert round_trip(connection, [b"by DN"], user_id=user) == [b"by DN"]
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):   # guest's DN: no user
        tls_connection(broker, client_context(broker.pki, "guest"), external)


@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_plain_amqp_on_the_tls_port_and_tls_on_the_plain_port_are_closed_cleanly(
        dedicated):
    broker = dedicated()
    with RunningBystander(broker):
        with socket.create_connection((broker.host, broker.tls_port),
                                      timeout=DEADLINE) as plain:
            plain.sendall(PROTOCOL_HEADER)
            received = read_until_closed(plain)
        assert not received.startswith(b"\x01")   # no Connection.Start, at most an alert
        with pytest.raises(ssl.SSLError):
            with socket.create_connection((broker.host, broker.port),
                                          timeout=DEADLINE) as sock:
                client_context(broker.pki).wrap_socket(sock, server_hostname=SERVER_NAME)
        with tls_connection(broker, client_context(broker.pki)) as connection:
            assert round_trip(connection, [b"still served"]) == [b"still served"]
    assert broker.warren.process.poll() is None
    assert not any("Traceback" in line or "level=ERROR" in line
                   for line in broker.warren.log_lines), "".join(broker.warren.log_lines)


@pytest.mark.warren_only("a Warren TLS broker of its own configuration (dedicated)")
def test_the_tls_handshake_counts_against_the_handshake_limits(dedicated):
    broker = dedicated(top="[limits]\nunauthenticated_connection_max = 3\n"
                           "handshake_timeout = 2\n")
    with RunningBystander(broker):
        stalled = [stalled_tls_handshake(broker) for _ in range(3)]
        # Past the cap, a new socket is closed at accept, before its TLS handshake.
        with pytest.raises(REFUSED):
            offered_mechanisms(broker, client_context(broker.pki))
        for sock in stalled:         # dropped by handshake_timeout
            read_until_closed(sock)
            sock.close()
        assert "PLAIN" in offered_mechanisms(broker, client_context(broker.pki))
    assert broker.warren.process.poll() is None


def stalled_tls_handshake(broker: TlsBroker) -> socket.socket:
    """A socket in the middle of a TLS handshake: the ClientHello sent and the broker's
    first answer read (so the broker has admitted it), nothing more."""
    sock = socket.create_connection((broker.host, broker.tls_port), timeout=DEADLINE)
    outgoing = ssl.MemoryBIO()
    tls = client_context(broker.pki).wrap_bio(ssl.MemoryBIO(), outgoing,
                                              server_hostname=SERVER_NAME)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    sock.sendall(outgoing.read())
    assert sock.recv(1) == b"\x16"   # a TLS handshake record: the ServerHello
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    return read_socket_until_closed(sock, DEADLINE)
