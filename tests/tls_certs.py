"""Certificates for the TLS tests, made with the `openssl` command (tests needing them skip
when it is missing): a CA, a server certificate for localhost and 127.0.0.1 signed by it,
a client certificate signed by it, and a client certificate signed by another CA.

Import like helpers (tests/ is on sys.path): `from tls_certs import Certificates, make`.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CLIENT_SUBJECT = "/O=kanin tests/OU=clients/CN=tls-client"
# The same subject as `openssl x509 -noout -subject -nameopt RFC2253` prints it.
CLIENT_DN = "CN=tls-client,OU=clients,O=kanin tests"


@dataclass(frozen=True)
class Certificates:
    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_ca: Path  # another CA, which the broker does not trust
    rogue_client_cert: Path  # signed by rogue_ca, with the same subject as client_cert
    rogue_client_key: Path

    def client_context(self, with_certificate: bool = True) -> ssl.SSLContext:
        """A client's context trusting the CA; presenting the client certificate if asked."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context

    def rogue_client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(self.rogue_client_cert, self.rogue_client_key)
        return context


def openssl(*args: str | Path) -> str:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"openssl {' '.join(map(str, args))}:\n{result.stderr}"
    return result.stdout


def require_openssl() -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed; the TLS tests make certificates with it")


def make(directory: Path) -> Certificates:
    """Every certificate and key, in `directory` (EC P-256 keys: quick to make)."""
    require_openssl()
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca", "/O=kanin tests/CN=kanin test CA")
    rogue = _ca(directory, "rogue-ca", "/O=somebody else/CN=rogue CA")
    server = _signed(
        directory,
        "server",
        "/O=kanin tests/CN=localhost",
        ca,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    client = _signed(directory, "client", CLIENT_SUBJECT, ca, "extendedKeyUsage=clientAuth\n")
    rogue_client = _signed(
        directory, "rogue-client", CLIENT_SUBJECT, rogue, "extendedKeyUsage=clientAuth\n"
    )
    return Certificates(
        directory,
        ca[0],
        *server,
        *client,
        rogue[0],
        *rogue_client,
    )


def _key(path: Path) -> None:
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


def _ca(directory: Path, name: str, subject: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _key(key)
    openssl(
        *("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "2", "-subj", subject),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    return cert, key


def _signed(
    directory: Path, name: str, subject: str, ca: tuple[Path, Path], extensions: str
) -> tuple[Path, Path]:
    cert, key, request = (directory / f"{name}{suffix}" for suffix in (".pem", ".key", ".csr"))
    _key(key)
    openssl("req", "-new", "-key", key, "-out", request, "-subj", subject)
    extension_file = directory / f"{name}.ext"
    extension_file.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n" + extensions
    )
    openssl(
        *("x509", "-req", "-in", request, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial"),
        *("-out", cert, "-days", "2", "-extfile", extension_file),
    )
    return cert, key
