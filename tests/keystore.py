"""A TLS key pair for a test SQL endpoint (``kappa serve --tls-keystore``, the chart's ``kappa-serve-tls``)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path


def make_keystore(folder: Path, names: str = "IP:127.0.0.1,DNS:localhost") -> tuple[Path, Path, Path]:
    """(PKCS12 keystore, its password file, the certificate as PEM): a self-signed key pair made
    with the JDK's ``keytool``, valid two days, ``names`` (keytool's ``SAN=`` list) in its subject
    alternative names, which clients check (default: an endpoint on 127.0.0.1)."""
    from kappa.core.jvm import java_executable

    keytool = str(Path(java_executable()).parent / "keytool")
    folder.mkdir(parents=True, exist_ok=True)
    keystore, secret, pem = folder / "serve.p12", folder / "serve.p12.password", folder / "serve-ca.pem"
    password = uuid.uuid4().hex
    secret.write_text(password + "\n")
    for args in (["-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", "2", "-dname", "CN=localhost",
                  "-ext", f"SAN={names}"], ["-exportcert", "-rfc", "-file", str(pem)]):
        subprocess.run([keytool, *args, "-alias", "kappa-serve", "-storetype", "PKCS12", "-keystore", str(keystore),
                        "-storepass", password], check=True, capture_output=True, timeout=120)
    return keystore, secret, pem
