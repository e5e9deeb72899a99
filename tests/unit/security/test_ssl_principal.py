"""The SSL principal: a certificate's subject in Java's RFC 2253 form, mapped by Kafka's rules.

Mapping cases are Kafka's own (SslPrincipalMapperTest); DN cases compare with what Java's
X500Principal.getName() prints for the same certificate.
"""

from __future__ import annotations

import pytest

from odradek.broker.security.rfc2253 import DerError, subject_rfc2253
from odradek.broker.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper
from odradek.broker.security.tls_connection import principal_builder

x509 = pytest.importorskip("cryptography.x509")
from cryptography.x509.oid import NameOID  # noqa: E402

from tests.support.certs import TestPki  # noqa: E402


def _dn_of(tmp_path, attrs: list) -> str:
    pki = TestPki(tmp_path)
    issued = pki.issue("c", x509.Name(attrs))
    return subject_rfc2253(issued.cert.public_bytes(_DER))


from cryptography.hazmat.primitives.serialization import Encoding  # noqa: E402

_DER = Encoding.DER
A = x509.NameAttribute


def test_rfc2253_order_keywords_and_escaping(tmp_path) -> None:
    dn = _dn_of(tmp_path, [A(NameOID.COUNTRY_NAME, "US"), A(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
                           A(NameOID.LOCALITY_NAME, "Cupertino"), A(NameOID.ORGANIZATION_NAME, "Sun, Inc"),
                           A(NameOID.ORGANIZATIONAL_UNIT_NAME, "Java+Soft"), A(NameOID.COMMON_NAME, " Duke;1 ")])
    assert dn == "CN=\\ Duke\\;1\\ ,OU=Java\\+Soft,O=Sun\\, Inc,L=Cupertino,ST=CA,C=US"


def test_rfc2253_unknown_attribute_types_are_oid_and_hex_der(tmp_path) -> None:
    # Java: EMAILADDRESS has no RFC 2253 keyword -> "1.2.840.113549.1.9.1=#16..." (IA5String TLV).
    dn = _dn_of(tmp_path, [A(NameOID.DOMAIN_COMPONENT, "example"), A(NameOID.EMAIL_ADDRESS, "a@b.c"),
                           A(NameOID.COMMON_NAME, "alice")])
    assert dn == "CN=alice,1.2.840.113549.1.9.1=#1605" + b"a@b.c".hex() + ",DC=example"


def test_rfc2253_multi_valued_rdn(tmp_path) -> None:
    pki = TestPki(tmp_path)
    name = x509.Name([x509.RelativeDistinguishedName([A(NameOID.ORGANIZATION_NAME, "Org")]),
                      x509.RelativeDistinguishedName([A(NameOID.COMMON_NAME, "x"), A(NameOID.USER_ID, "42")])])
    issued = pki.issue("m", name)
    dn = subject_rfc2253(issued.cert.public_bytes(_DER))
    assert dn in ("CN=x+UID=42,O=Org", "UID=42+CN=x,O=Org")  # DER sorts SET members by encoding


def test_rfc2253_rejects_garbage() -> None:
    with pytest.raises(DerError):
        subject_rfc2253(b"\x30\x82\xff\xff\x00")


@pytest.mark.parametrize(("rules", "dn", "name"), [
    ("DEFAULT", "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US", "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US", "DUKE@JAVASOFT"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,DEFAULT",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US", "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=other,OU=People", "CN=other,OU=People"),
    # Kafka's testCommaWithWhitespace: an escaped comma inside the CN.
    ("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT", "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz", "Tkac\\, Adam"),
    # A reference to a group the pattern lacks stays literal (Kafka's escapeLiteralBackReferences).
    ("RULE:^CN=(.*),OU=(.*)$/$1@$3/", "CN=a,OU=b", "a@$3"),
    ("RULE:^CN=(.*?)\\/x,.*$/$1/", "CN=a/x,O=b", "a"),
])
def test_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert SslPrincipalMapper(rules).name(dn) == name


@pytest.mark.parametrize("rules", ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
                                   "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
                                   "RULE:CN=(.*?),OU=ServiceUsers.*/$1/L/U",
                                   "RULE:CN=(.*?),OU=ServiceUsers.*/$1/U/L",
                                   "RULE:CN=([/$1/"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_no_matching_rule_fails() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x,OU=Other"):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")


class _FakeSslObject:
    """Stands in for ssl.SSLObject: the one method the principal builder calls."""

    def __init__(self, der: bytes | None) -> None:
        self.der = der

    def getpeercert(self, binary_form: bool = False) -> bytes | None:
        assert binary_form
        return self.der


def test_principal_builder_user_and_anonymous(tmp_path) -> None:
    pki = TestPki(tmp_path)
    der = pki.client("Alice").cert.public_bytes(_DER)
    build = principal_builder("RULE:^CN=([^,]*),OU=Clients,.*$/$1/L,DEFAULT")
    assert str(build(_FakeSslObject(der))) == "User:alice"
    assert str(build(_FakeSslObject(None))) == "User:ANONYMOUS"
    assert str(principal_builder("DEFAULT")(_FakeSslObject(der))) == "User:CN=Alice,OU=Clients,O=Odradek Test,C=US"
