"""Certificates for the TLS tests, made by trustme on the spot, and client TLS contexts.

`make_pki(directory)` writes (PEM unless said otherwise):

| file | what |
|---|---|
| ca.pem | the CA the broker trusts for client certificates and clients trust for the broker |
| server.pem, server.key | the broker: localhost and 127.0.0.1, signed by ca |
| expired-server.pem, .key | the same names, expired |
| guest.pem, .key, .p12 | a client: CN=guest (a user on every broker) |
| tls-user.pem, .key | a client: CN=tls-user, subject alternative name tls-user@example.test |
| nobody.pem, .key | a client: CN=nobody (no such user) |
| expired-guest.pem, .key | a client: CN=guest, expired |
| foreign-guest.pem, .key | a client: CN=guest, signed by another CA |
| other-ca.pem | that other CA: a client that trusts only it distrusts the broker |

`.p12` files are PKCS#12 key stores for the Java client (password P12_PASSWORD).
`python tests/support/tls_support.py DIR` writes the same files into DIR, e.g. to
configure a RabbitMQ node with them (tests/integration/test_tls.py says how).
"""

import datetime
import ssl
import sys
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.serialization import pkcs12

P12_PASSWORD = "changeit"
CLIENTS = ("guest", "tls-user", "nobody")
SERVER_NAME = "localhost"


def make_pki(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other_ca = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    other_ca.cert_pem.write_to_path(str(directory / "other-ca.pem"))
    now = datetime.datetime.now(datetime.timezone.utc)
    expired = {"not_before": now - datetime.timedelta(days=30),
               "not_after": now - datetime.timedelta(days=1)}
    _write(directory, "server", ca.issue_cert(SERVER_NAME, "127.0.0.1"))
    _write(directory, "expired-server", ca.issue_cert(SERVER_NAME, "127.0.0.1", **expired))
    _write(directory, "guest", ca.issue_cert("guest.client.test", common_name="guest"))
    _write(directory, "tls-user", ca.issue_cert("tls-user@example.test",
                                                common_name="tls-user"))
    _write(directory, "nobody", ca.issue_cert("nobody.client.test", common_name="nobody"))
    _write(directory, "expired-guest", ca.issue_cert("guest.client.test",
                                                     common_name="guest", **expired))
    _write(directory, "foreign-guest", other_ca.issue_cert("guest.client.test",
                                                           common_name="guest"))
    _write_p12(directory, "guest")
    return directory


def _write(directory: Path, name: str, leaf: trustme.LeafCert) -> None:
    leaf.cert_chain_pems[0].write_to_path(str(directory / f"{name}.pem"))
    leaf.private_key_pem.write_to_path(str(directory / f"{name}.key"))


def _write_p12(directory: Path, name: str) -> None:
    """A PKCS#12 key store (key + certificate) in the legacy encryption every JDK reads."""
    key = serialization.load_pem_private_key((directory / f"{name}.key").read_bytes(), None)
    certificate = x509.load_pem_x509_certificate((directory / f"{name}.pem").read_bytes())
    encryption = (serialization.PrivateFormat.PKCS12.encryption_builder()
                  .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
                  .hmac_hash(hashes.SHA1()).build(P12_PASSWORD.encode()))
    (directory / f"{name}.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        name.encode(), key, certificate, None, encryption))


def client_context(pki: Path, certificate: str | None = None, ca: str = "ca.pem",
                   version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that trusts `ca` and presents `certificate` (a name of the
    table above), at exactly `version` when given."""
    context = ssl.create_default_context(cafile=str(pki / ca))
    if certificate is not None:
        context.load_cert_chain(str(pki / f"{certificate}.pem"), str(pki / f"{certificate}.key"))
    if version is not None:
        context.minimum_version = context.maximum_version = version
        context.set_ciphers("ALL:@SECLEVEL=0")    # let the client offer TLS 1.1 at all
    return context


if __name__ == "__main__":
    make_pki(Path(sys.argv[1]))
