"""kappa.services.tls_relay: plain connections to the relay reach a real TLS server only when its
certificate verifies; the relay is what `kappa dbt` hands dbt, whose own `use_ssl` verifies nothing
(dbt-spark: CERT_NONE). A TLS echo server on 127.0.0.1 with a certificate made here."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kappa.services.serve import ServeError
from kappa.services.tls_relay import tls_relay


def _certificate(tmp_path, name: str, san: str = "127.0.0.1"):
    """(certificate PEM path, key PEM path): self-signed, for ``san`` (an IP address)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(san))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


@pytest.fixture
def tls_echo(tmp_path):
    """(port, certificate PEM, connections seen): a TLS server on 127.0.0.1 that echoes each
    connection's bytes upper-cased."""
    crt, key = _certificate(tmp_path, "endpoint")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve():
        while True:
            try:
                raw, _ = server.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    seen.append(conn.version())
                    while data := conn.recv(65536):
                        conn.sendall(data.upper())
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], crt, seen
    server.close()


def _through(host: str, port: int, payload: bytes) -> bytes:
    """Send ``payload`` and read as many bytes back, as a request/response client (Thrift) does."""
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(payload)
        out = b""
        while len(out) < len(payload) and (data := conn.recv(65536)):
            out += data
        return out


def test_connections_are_carried_over_tls_to_a_server_whose_certificate_verifies(tls_echo):
    port, crt, seen = tls_echo
    payload = b"sasl plain login and rows " * 10_000  # more than one read on each side
    with tls_relay("127.0.0.1", port, crt) as (host, relay_port):
        assert host == "127.0.0.1" and relay_port != port
        assert _through(host, relay_port, payload) == payload.upper()
        assert _through(host, relay_port, b"again") == b"AGAIN"  # one TLS connection per connection
    assert seen[-2:] == ["TLSv1.3", "TLSv1.3"]
    with pytest.raises(OSError):  # the listener is gone after the with
        socket.create_connection((host, relay_port), timeout=2)


def test_a_server_whose_certificate_does_not_verify_gets_no_connection(tls_echo, tmp_path):
    # An impostor: dbt-spark's use_ssl would have talked to it (CERT_NONE); the relay refuses
    # before listening, saying why.
    port, _crt, seen = tls_echo
    other, _ = _certificate(tmp_path, "someone-else")
    for ca, trust in ((None, "system's certificate authorities"), (other, "someone-else.crt")):
        with pytest.raises(ServeError, match=f"certificate verify failed.*{trust}"):
            with tls_relay("127.0.0.1", port, ca):
                pass
    assert seen == []  # no handshake completed


def test_a_certificate_for_another_host_name_is_refused(tmp_path):
    crt, key = _certificate(tmp_path, "elsewhere", san="10.9.8.7")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    with socket.create_server(("127.0.0.1", 0)) as server:
        def accept_one():
            raw, _ = server.accept()
            try:
                context.wrap_socket(raw, server_side=True).close()
            except (OSError, ssl.SSLError):
                pass

        threading.Thread(target=accept_one, daemon=True).start()
        with pytest.raises(ServeError, match="(?i)IP address mismatch|hostname"):
            with tls_relay("127.0.0.1", server.getsockname()[1], crt):
                pass


def test_an_unreadable_ca_file_is_named(tmp_path):
    with pytest.raises(ServeError, match="KAPPA_SERVE_TLS_CA_FILE: cannot read .*missing.pem"):
        with tls_relay("127.0.0.1", 1, tmp_path / "missing.pem"):
            pass
