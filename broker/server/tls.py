"""TLS for the amqps listener: the server's context from the `[tls]` settings, the
handshake of each accepted socket, the client certificate's user name for EXTERNAL, and
a SocketTransport that encrypts and decrypts.

TLS runs over memory BIOs (`ssl.SSLContext.wrap_bio`): the socket stays a plain trio
socket, read and written with the same non-blocking system calls as a plain AMQP
connection (transport.py), so one read of up to 256 KiB is decrypted at once and the
output of a batch is encrypted and sent with one write. Ciphertext the socket did not
take waits in `TlsSession` and goes first on the next send."""

import logging
import os
import ssl
from typing import TYPE_CHECKING

import trio

from broker.config import ConfigError, TlsSettings
from broker.core.certificate_login import NO_CERTIFICATE, NO_NAME, TlsPeer

from .admission import Admission
from .alarms import ResourceAlarm
from .drain_signal import DrainSignal
from .socket_io import RECEIVE_SIZE, receive_ready
from .transport import SocketTransport

if TYPE_CHECKING:
    from broker.core.broker import Broker

log = logging.getLogger("warren.server")

SEND_BATCH = 128 * 1024   # plaintext bytes encrypted and written at a time
VERIFY_MODES = {"verify_none": ssl.CERT_NONE, "verify_peer": ssl.CERT_OPTIONAL}
SAN_KINDS = {"dns": "DNS", "email": "email", "uri": "URI"}   # as ssl.getpeercert names them
# How RabbitMQ writes subject attributes in a distinguished name (ssl.getpeercert gives
# OpenSSL's long names); others appear as their OID, as in RabbitMQ.
DN_ATTRIBUTES = {
    "commonName": "CN", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "title": "TITLE", "serialNumber": "SERIALNUMBER", "pseudonym": "PSEUDONYM",
    "domainComponent": "DC", "emailAddress": "EMAILADDRESS", "userId": "UID",
    "surname": "SN", "givenName": "GIVENNAME", "initials": "INITIALS",
    "generationQualifier": "GENERATIONQUALIFIER",
    "streetAddress": "2.5.4.9", "postalCode": "2.5.4.17", "businessCategory": "2.5.4.15",
    "description": "2.5.4.13", "name": "2.5.4.41", "dnQualifier": "2.5.4.46",
}
DN_ESCAPED = frozenset('"+,;<>\\')


class TlsHandshakeFailed(Exception):
    """The client did not complete a TLS handshake (not TLS, a certificate refused by
    either side, a protocol version below TLS 1.2, or the socket closed)."""


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The amqps listener's context: TLS 1.2 and 1.3 only (no renegotiation), the
    server certificate and key, and client certificates checked against `cacertfile`
    as `verify` and `fail_if_no_peer_cert` say. ConfigError when a file is missing,
    unreadable, or the key does not belong to the certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION   # a client cannot make us redo the work
    try:
        context.load_cert_chain(settings.certfile, settings.keyfile)
    except ssl.SSLError as error:   # an OSError too: first
        raise ConfigError(f"the TLS certificate {settings.certfile!r} and key "
                          f"{settings.keyfile!r} ([tls] certfile, keyfile) do not form a "
                          f"pair, or are not PEM: {error.reason or error}") from error
    except OSError as error:
        raise ConfigError(f"cannot read the TLS certificate or key ([tls] certfile "
                          f"{settings.certfile!r}, keyfile {settings.keyfile!r}): "
                          f"{error.strerror or error}") from error
    if settings.cacertfile:
        try:
            context.load_verify_locations(cafile=settings.cacertfile)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"cannot read the CA certificates ([tls] cacertfile "
                              f"{settings.cacertfile!r}): "
                              f"{getattr(error, 'strerror', None) or error}") from error
    context.verify_mode = (ssl.CERT_REQUIRED if settings.fail_if_no_peer_cert
                           else VERIFY_MODES[settings.verify])
    return context


class TlsListener:
    """The amqps port's settings at run time: its context, and which certificate field
    names the user for EXTERNAL."""

    def __init__(self, settings: TlsSettings, context: ssl.SSLContext):
        self.port = settings.port
        self.context = context
        self.login_from = settings.ssl_cert_login_from
        self.san_kind = SAN_KINDS[settings.ssl_cert_login_san_type]
        self.san_index = settings.ssl_cert_login_san_index

    async def handshake(self, stream: trio.SocketStream) -> "TlsSession":
        """The TLS handshake of an accepted socket; TlsHandshakeFailed when it fails.
        The caller bounds it in time (handshake_timeout)."""
        session = TlsSession(self.context, stream.socket)
        try:
            await session.handshake()
        except ssl.SSLError as error:
            raise TlsHandshakeFailed(error.reason or str(error)) from error
        except (OSError, trio.BrokenResourceError) as error:
            raise TlsHandshakeFailed(f"socket lost: {error}") from error
        session.peer = self.peer_of(session.certificate())
        return session

    def peer_of(self, certificate: dict | None) -> TlsPeer:
        """The user name a verified client certificate gives (RabbitMQ's
        ssl_cert_login_from: every common name joined by ",", the subject's
        distinguished name, or the n-th subject alternative name of the configured
        type)."""
        if not certificate:
            return TlsPeer(None, NO_CERTIFICATE)
        if self.login_from == "distinguished_name":
            return TlsPeer(distinguished_name(certificate.get("subject", ())))
        if self.login_from == "common_name":
            names = [value for rdn in certificate.get("subject", ())
                     for key, value in rdn if key == "commonName"]
            return TlsPeer(",".join(names)) if names else TlsPeer(None, NO_NAME)
        names = [value for kind, value in certificate.get("subjectAltName", ())
                 if kind == self.san_kind]
        if self.san_index < len(names):
            return TlsPeer(names[self.san_index])
        return TlsPeer(None, NO_NAME)


def distinguished_name(subject: tuple) -> str:
    """The subject as RabbitMQ writes it (RFC 4514): the last RDN first, attributes of
    one RDN joined by "+", special characters escaped with a backslash, and bytes
    outside printable ASCII (of UTF-8) as backslash and two hex digits."""
    return ",".join("+".join(f"{DN_ATTRIBUTES.get(kind, kind)}={_dn_escape(value)}"
                             for kind, value in rdn)
                    for rdn in reversed(subject))


def _dn_escape(value: str) -> str:
    escaped = []
    last = len(value) - 1
    for index, char in enumerate(value):
        if (char in DN_ESCAPED or (index == 0 and char in " #")
                or (index == last and char == " ")):
            escaped.append("\\" + char)
        elif " " <= char < "~":
            escaped.append(char)
        else:
            escaped.append("".join(f"\\{byte:02X}" for byte in char.encode()))
    return "".join(escaped)


class TlsSession:
    """One socket's TLS state over memory BIOs, driven by non-blocking system calls."""

    def __init__(self, context: ssl.SSLContext, sock):
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._sock = sock
        self._fd = sock.fileno()
        self._unsent = bytearray()       # ciphertext the socket has not taken yet
        self._unsent_plaintext = 0       # the plaintext bytes it carries
        self._plaintext = memoryview(bytearray(RECEIVE_SIZE))
        self._ended = False              # the peer closed (close_notify or EOF)
        self.peer = TlsPeer(None, NO_CERTIFICATE)

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                finished = True
            except ssl.SSLWantReadError:
                finished = False
            except ssl.SSLError:
                self._send_alert()
                raise
            self._unsent += self._outgoing.read()
            while not self._write_unsent():
                await trio.lowlevel.wait_writable(self._sock)
            if finished:
                return
            await trio.lowlevel.wait_readable(self._sock)
            data = receive_ready(self._fd)
            if data == b"":
                raise ConnectionError("the peer closed the socket during the TLS handshake")
            if data:
                self._incoming.write(data)

    def _send_alert(self) -> None:
        """A failed handshake leaves an alert for the peer (unknown CA, protocol
        version...): send it if the socket takes it now, never wait for it."""
        try:
            os.write(self._fd, self._outgoing.read())
        except OSError:
            pass

    def certificate(self) -> dict | None:
        """The client's certificate, verified against cacertfile (None: none was asked
        for or sent)."""
        return self._tls.getpeercert() or None

    # -- after the handshake (SocketTransport's I/O) ---------------------------------

    def receive(self) -> bytes | None:
        """One non-blocking read, decrypted: None when nothing is there yet, b"" when
        the peer closed."""
        data = receive_ready(self._fd)
        if data:
            self._incoming.write(data)
        elif data == b"":
            self._incoming.write_eof()
        plaintext = self._decrypt()
        if self._outgoing.pending:        # e.g. a TLS 1.3 key update answered
            self._unsent += self._outgoing.read()
            self._write_unsent()          # what the socket does not take goes later
        if plaintext:
            return plaintext
        return b"" if data == b"" or self._ended else None

    def _decrypt(self) -> bytes:
        tls = self._tls
        view = self._plaintext
        size = 0
        try:
            while size < RECEIVE_SIZE:
                # With a buffer, read() returns the count read into it (typeshed has
                # only the bytes of the buffer-less form).
                count: int = tls.read(RECEIVE_SIZE - size, view[size:])  # type: ignore[assignment]
                if not count:
                    self._ended = True
                    break
                size += count
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            self._ended = True
        except ssl.SSLError as error:
            raise trio.BrokenResourceError(f"TLS error: {error}") from error
        return bytes(view[:size])

    def flush(self) -> int | None:
        """Write the ciphertext waiting: the plaintext bytes it carried once all of it
        went, None while the socket is full."""
        if not self._write_unsent():
            return None
        sent, self._unsent_plaintext = self._unsent_plaintext, 0
        return sent

    def encrypt(self, plaintext) -> None:
        """Encrypt bytes to send; `flush` writes them."""
        try:
            self._tls.write(plaintext)
        except ssl.SSLError as error:
            raise trio.BrokenResourceError(f"TLS error: {error}") from error
        self._unsent += self._outgoing.read()
        self._unsent_plaintext += len(plaintext)

    def _write_unsent(self) -> bool:
        """True once every ciphertext byte waiting is written."""
        unsent = self._unsent
        while unsent:
            try:
                written = os.write(self._fd, unsent)
            except BlockingIOError:
                return False
            except OSError as error:
                raise trio.BrokenResourceError(error) from error
            del unsent[:written]
        return True


class TlsSocketTransport(SocketTransport):
    """A SocketTransport whose bytes go through a TlsSession."""

    def __init__(self, stream: trio.SocketStream, session: TlsSession, broker: "Broker",
                 peer: tuple[str, int], alarm: ResourceAlarm, drain_signal: DrainSignal,
                 admission: Admission, accepted_at: float | None = None):
        self.tls = session
        super().__init__(stream, broker, peer, alarm, drain_signal, admission,
                         tls=session.peer, accepted_at=accepted_at)

    def _receive(self, fd: int) -> bytes | None:
        return self.tls.receive()

    def _send_now(self) -> bool:
        """Encrypt and send queued output, SEND_BATCH at a time, until the socket would
        block; True when all of it went."""
        chunks = self._chunks
        if self._buffer:
            chunks.append(self._buffer)
            self._buffer = bytearray()
        tls = self.tls
        while True:
            sent = tls.flush()
            if sent is None:
                return False
            if sent:
                self._sent(sent)
            if not chunks:
                return True
            tls.encrypt(_take(chunks, SEND_BATCH))


def _take(chunks: list, limit: int):
    """Remove up to `limit` bytes from the front of `chunks` and return them."""
    first = chunks[0]
    if len(first) >= limit:
        view = memoryview(first)
        if len(first) == limit:
            del chunks[0]
        else:
            chunks[0] = view[limit:]
        return view[:limit]
    size = count = 0
    for chunk in chunks:
        if size + len(chunk) > limit:
            break
        size += len(chunk)
        count += 1
    taken = chunks[:count]
    del chunks[:count]
    return taken[0] if count == 1 else b"".join(taken)
