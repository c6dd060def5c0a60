"""[tls] and auth_mechanisms in the configuration file: defaults, --tls-port, the values
refused before start-up, and certificate files that cannot be used (exit code 2 with a
message naming the file). Certificates are made here with trustme."""

import ssl

import pytest
import trustme

from broker.cli import main
from broker.config import ConfigError, load_settings
from broker.server.tls import server_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate and key signed by it, and a key of another pair."""
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost")
    other = ca.issue_cert("other.test")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(directory / "server.pem"))
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    other.private_key_pem.write_to_path(str(directory / "other.key"))
    (directory / "garbage.pem").write_text("not a certificate\n")
    return directory


def settings_from(tmp_path, text: str, **overrides):
    path = tmp_path / "warren.toml"
    path.write_text(text)
    return load_settings(str(path), overrides)


def tls_section(pki, extra: str = "") -> str:
    return (f'[tls]\nport = 5671\ncertfile = "{pki / "server.pem"}"\n'
            f'keyfile = "{pki / "server.key"}"\ncacertfile = "{pki / "ca.pem"}"\n{extra}')


def test_no_tls_listener_and_password_mechanisms_by_default(tmp_path):
    settings = settings_from(tmp_path, "")
    assert settings.tls.port is None and settings.tls.plain_listener
    assert settings.auth_mechanisms == ["PLAIN", "AMQPLAIN"]


def test_tls_settings_come_from_the_file_and_the_flag_overrides_the_port(tmp_path, pki):
    text = 'auth_mechanisms = ["PLAIN", "EXTERNAL"]\n' + tls_section(
        pki, 'verify = "verify_peer"\nfail_if_no_peer_cert = true\nplain_listener = false\n')
    settings = settings_from(tmp_path, text, tls_port=0)
    assert settings.tls.port == 0
    assert (settings.tls.verify, settings.tls.fail_if_no_peer_cert,
            settings.tls.plain_listener) == ("verify_peer", True, False)
    assert settings.auth_mechanisms == ["PLAIN", "EXTERNAL"]


@pytest.mark.parametrize("extra, message", [
    ('verify = "verify_all"\n', "'verify' in \\[tls\\] must be one of"),
    ("fail_if_no_peer_cert = true\n", "needs 'verify = \"verify_peer\"'"),
    ('ssl_cert_login_from = "serial_number"\n', "'ssl_cert_login_from' .* one of"),
    ('ssl_cert_login_san_type = "other_name"\n', "'ssl_cert_login_san_type' .* one of"),
    ("ssl_cert_login_san_index = -1\n", "'ssl_cert_login_san_index' .* 0 or more"),
    ('plain_listener = "no"\n', "'plain_listener' .* true or false"),
    ('cipher = "fast"\n', "unknown setting 'cipher'"),
])
def test_bad_tls_values_are_refused_naming_the_key(tmp_path, pki, extra, message):
    with pytest.raises(ConfigError, match=message):
        settings_from(tmp_path, tls_section(pki, extra))


@pytest.mark.parametrize("text, message", [
    ("[tls]\nport = 5671\n", "needs 'certfile' and 'keyfile'"),
    ('[tls]\nport = 5671\ncertfile = "a"\nkeyfile = "b"\nverify = "verify_peer"\n',
     "needs 'cacertfile'"),
    ("[tls]\nplain_listener = false\n", "needs a TLS 'port'"),
    ('auth_mechanisms = ["PLAIN", "CRAM-MD5"]\n', "'auth_mechanisms' must be a list of"),
    ('auth_mechanisms = "PLAIN"\n', "'auth_mechanisms' must be a list of"),
])
def test_incomplete_tls_and_unknown_mechanisms_are_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        settings_from(tmp_path, text)


def test_the_server_context_speaks_tls_1_2_and_up_and_asks_for_client_certificates(
        tmp_path, pki):
    settings = settings_from(tmp_path, tls_section(pki, 'verify = "verify_peer"\n'))
    context = server_context(settings.tls)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.options & ssl.OP_NO_RENEGOTIATION
    assert context.verify_mode == ssl.CERT_OPTIONAL
    settings.tls.fail_if_no_peer_cert = True
    assert server_context(settings.tls).verify_mode == ssl.CERT_REQUIRED
    settings.tls.verify = "verify_none"
    settings.tls.fail_if_no_peer_cert = False
    assert server_context(settings.tls).verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize("replace, message", [
    (("server.pem", "missing.pem"), "cannot read the TLS certificate or key .*missing.pem"),
    (("server.key", "missing.key"), "cannot read the TLS certificate or key .*missing.key"),
    (("server.key", "other.key"), "do not form a pair"),
    (("server.pem", "garbage.pem"), "do not form a pair, or are not PEM"),
    (("ca.pem", "missing-ca.pem"), "cannot read the CA certificates .*missing-ca.pem"),
])
def test_unusable_certificate_files_stop_the_start_with_exit_code_2(tmp_path, pki, capsys,
                                                                    replace, message):
    config = tmp_path / "warren.toml"
    config.write_text(tls_section(pki).replace(*replace))
    code = main(["serve", "--config", str(config), "--tls-port", "0",
                 "--data-dir", str(tmp_path / "data")])
    assert code == 2
    assert capsys.readouterr().err.startswith("warren: ")
    with pytest.raises(ConfigError, match=message):
        server_context(load_settings(str(config), {}).tls)
    assert not (tmp_path / "data").exists()   # stopped before anything was created
