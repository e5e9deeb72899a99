"""Test certificates made at test time with the ``cryptography`` package: a CA, server and client
certificates signed by it, and what the tests need to break TLS on purpose (an expired client
certificate, a certificate from another CA).

    pki = TestPki(tmp_path)            # writes PEM files under tmp_path
    pki.ca_pem                         # the CA certificate (a truststore)
    server = pki.server()              # CN=localhost, SAN localhost + 127.0.0.1 (+ extra names)
    client = pki.client("alice")       # CN=alice,OU=Clients,O=Odradek Test,C=US
    server.cert_pem, server.key_pem    # files; server.keystore_pem: key + chain in one file
    server.broker_props()              # ssl.* for a PEM key store / trust store file
    pki.expired_client("late"), TestPki(other_dir).client("stranger")  # refused material

Keys are EC P-256 (fast to generate). ``encrypted_key_password`` writes the key store's key
encrypted (PKCS#8) to test ``ssl.key.password``. ``pkcs12()`` writes a PKCS12 key store.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import pytest

x509 = pytest.importorskip("cryptography.x509", reason="the cryptography package makes the test certificates")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

DAY = dt.timedelta(days=1)


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Odradek Test")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass
class Issued:
    """A certificate and its key as PEM files (and the objects, for tests that need them)."""

    name: str
    cert_pem: Path
    key_pem: Path
    keystore_pem: Path  # key + certificate chain in one file: Kafka's PEM ssl.keystore.location
    ca_pem: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def broker_props(self, prefix: str = "") -> dict[str, str]:
        """ssl.* settings for a broker (or a Java client) with this key store and the CA as trust store."""
        return {
            f"{prefix}ssl.keystore.type": "PEM",
            f"{prefix}ssl.keystore.location": str(self.keystore_pem),
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": str(self.ca_pem),
        }

    def inline_props(self) -> dict[str, str]:
        """The same material inline (ssl.keystore.key / certificate.chain / truststore.certificates)."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": self.key_pem.read_text(),
            "ssl.keystore.certificate.chain": self.cert_pem.read_text(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": self.ca_pem.read_text(),
        }

    def pkcs12(self, password: str) -> Path:
        path = self.cert_pem.with_suffix(".p12")
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            self.name.encode(), self.key, self.cert, None,
            serialization.BestAvailableEncryption(password.encode())))
        return path


class TestPki:
    """A CA in ``directory`` that issues certificates into it."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, ca_name: str = "Odradek Test CA") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = _name(ca_name)
        self.ca_cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca_pem = self.dir / f"{ca_name.replace(' ', '-').lower()}.pem"
        self.ca_pem.write_bytes(self.ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_name: str, subject: x509.Name, *, server: bool = False, dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = (), not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
              encrypted_key_password: str | None = None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - DAY).not_valid_after(not_after or now + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
        )
        if server or dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_pem = self.dir / f"{file_name}.crt.pem"
        key_pem = self.dir / f"{file_name}.key.pem"
        keystore_pem = self.dir / f"{file_name}.keystore.pem"
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(encrypted_key_password.encode()) if encrypted_key_password
            else serialization.NoEncryption())
        key_bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        cert_bytes = cert.public_bytes(serialization.Encoding.PEM)
        cert_pem.write_bytes(cert_bytes)
        key_pem.write_bytes(key_bytes)
        keystore_pem.write_bytes(key_bytes + cert_bytes)
        return Issued(file_name, cert_pem, key_pem, keystore_pem, self.ca_pem, key, cert)

    def server(self, file_name: str = "server", dns: tuple[str, ...] = ("localhost",),
               ips: tuple[str, ...] = ("127.0.0.1",), **kw: object) -> Issued:
        return self.issue(file_name, _name("localhost", "Brokers"), server=True, dns=dns, ips=ips, **kw)  # type: ignore[arg-type]

    def client(self, cn: str, ou: str = "Clients", **kw: object) -> Issued:
        return self.issue(cn, _name(cn, ou), **kw)  # type: ignore[arg-type]

    def expired_client(self, cn: str) -> Issued:
        now = dt.datetime.now(dt.UTC)
        return self.issue(cn, _name(cn, "Clients"), not_before=now - 10 * DAY, not_after=now - DAY)


def ssl_listener_props(server: Issued, port: int, plaintext_port: int | None = None, *,
                       client_auth: str = "none", host: str = "127.0.0.1") -> dict[str, str]:
    """Broker overrides for an SSL listener on ``port`` (and a PLAINTEXT one beside it if given)."""
    listeners = f"SSL://{host}:{port}"
    if plaintext_port is not None:
        listeners = f"PLAINTEXT://{host}:{plaintext_port}," + listeners
    return {"listeners": listeners, "advertised.listeners": listeners, "ssl.client.auth": client_auth,
            **server.broker_props()}
