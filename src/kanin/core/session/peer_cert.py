"""What a session knows of the TLS under it, and the user name the EXTERNAL mechanism takes
from a client certificate (https://www.rabbitmq.com/access-control.html, the
rabbitmq_auth_mechanism_ssl plugin). Pure: the asyncio edge (kanin.server.tls) reads the
TLS connection and hands over a TlsPeer.

Names are as Python's ssl module gives a certificate's subject and issuer
(SSLSocket.getpeercert): a sequence of relative distinguished names (RDNs), each a
sequence of (attribute, value) pairs, in the certificate's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Rdn = Sequence[tuple[str, str]]
Name = Sequence[Rdn]

# Python names attributes by OpenSSL's long names; a distinguished name uses the short ones
# (RFC 4514 section 3, and OpenSSL's own where RFC 4514 has none).
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "street",
    "domainComponent": "DC",
    "userId": "UID",
    "surname": "SN",
    "givenName": "GN",
}
_ESCAPED = set('"+,;<>\\')


@dataclass(frozen=True)
class TlsPeer:
    """A connection's TLS: its protocol version and cipher, and the client certificate's
    subject and issuer when the client presented one that verified (None otherwise)."""

    protocol: str
    cipher: str
    subject: Name | None = None
    issuer: Name | None = None


def distinguished_name(name: Name) -> str:
    """The RFC 4514 string of a name: RDNs most specific first, comma-separated, special
    characters escaped. For ASCII names it is what `openssl x509 -noout -subject -nameopt
    RFC2253` prints, the form RabbitMQ's ssl_cert_login_from = distinguished_name uses."""
    return ",".join("+".join(_attribute(kind, value) for kind, value in rdn) for rdn in name[::-1])


def _attribute(kind: str, value: str) -> str:
    return f"{_SHORT_NAMES.get(kind, kind)}={_escape(value)}"


def _escape(value: str) -> str:
    chars = ["\\00" if c == "\x00" else f"\\{c}" if c in _ESCAPED else c for c in value]
    if value.startswith((" ", "#")):
        chars[0] = "\\" + chars[0]
    if len(value) > 1 and value.endswith(" "):  # a lone space is escaped just above
        chars[-1] = "\\ "
    return "".join(chars)


def common_name(name: Name) -> str | None:
    """The name's first common name (CN), as RabbitMQ's ssl_cert_login_from = common_name
    takes it; None if it has none."""
    for rdn in name:
        for kind, value in rdn:
            if kind == "commonName":
                return value
    return None


def login_name(peer: TlsPeer | None, login_from: str) -> str | None:
    """The user name EXTERNAL logs in as: from the verified client certificate's subject,
    by ssl_cert_login_from ("distinguished_name" or "common_name"); None without one."""
    if peer is None or peer.subject is None:
        return None
    if login_from == "common_name":
        return common_name(peer.subject)
    return distinguished_name(peer.subject)
