"""The subject of an X.509 certificate as Java's ``X500Principal.getName()`` (RFC 2253) writes it.

Kafka builds an SSL principal from that string (``ssl.principal.mapping.rules`` match on it), so
Odradek must produce the same text from the same certificate. Format (RFC 2253, Java's choices):

- RDNs in reverse order of the DER sequence (most specific first: ``CN=alice,O=Acme,C=US``),
  separated by ``,`` without spaces; the attributes of a multi-valued RDN joined by ``+``.
- Attribute types with an RFC 2253 keyword (CN, C, L, ST, O, OU, STREET, DC, UID) are written by
  keyword with the decoded string value, escaping ``, + " \\ < > ;`` and a leading ``#`` or space
  and a trailing space with a backslash.
- Any other type (emailAddress, serialNumber, ...) is written as its dotted OID and ``#`` + the hex
  of the value's whole DER encoding (tag, length, contents), lower case, as Java does.

Input is the certificate's DER bytes (``SSLObject.getpeercert(binary_form=True)``); only the
structure down to the subject is walked: Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
[0] version OPTIONAL, serialNumber, signature, issuer, validity, subject, ... } }.
"""

from __future__ import annotations

_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# Universal string types and how their contents decode.
_STRING_CODECS = {0x0C: "utf-8", 0x13: "latin-1", 0x16: "latin-1", 0x14: "latin-1", 0x1A: "latin-1",
                  0x1E: "utf-16-be", 0x1C: "utf-32-be"}
_SPECIAL = set(',+"\\<>;')


class DerError(ValueError):
    """The certificate's DER encoding is malformed."""


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the element at ``pos``."""
    if pos + 2 > len(data):
        raise DerError("truncated element")
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or pos + n > len(data):
            raise DerError("bad length")
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    if pos + length > len(data):
        raise DerError("element runs past its parent")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in [start, end)."""
    out = []
    pos = start
    while pos < end:
        tag, cstart, cend = _tlv(data, pos)
        out.append((tag, pos, cstart, cend))
        pos = cend
    return out


def _oid(content: bytes) -> str:
    if not content:
        raise DerError("empty OID")
    first = content[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for b in content[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(p) for p in parts)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in _SPECIAL or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_rfc2253(der: bytes) -> str:
    """The certificate's subject DN in Java's RFC 2253 form (see the module docstring)."""
    _, cstart, cend = _tlv(der, 0)  # Certificate
    tbs_tag, tstart, tend = _tlv(der, cstart)
    if tbs_tag != 0x30:
        raise DerError("tbsCertificate is not a SEQUENCE")
    fields = _children(der, tstart, tend)
    if fields and fields[0][0] == 0xA0:  # explicit [0] version
        fields = fields[1:]
    if len(fields) < 5:
        raise DerError("tbsCertificate has too few fields")
    _, _, sstart, send = fields[4]  # serialNumber, signature, issuer, validity, subject
    rdns = []
    for _, _, rstart, rend in _children(der, sstart, send):  # SET OF AttributeTypeAndValue
        attrs = []
        for _, _, astart, aend in _children(der, rstart, rend):
            parts = _children(der, astart, aend)
            if len(parts) != 2 or parts[0][0] != 0x06:
                raise DerError("bad AttributeTypeAndValue")
            oid = _oid(der[parts[0][2]:parts[0][3]])
            vtag, vpos, vstart, vend = parts[1]
            keyword = _KEYWORDS.get(oid)
            codec = _STRING_CODECS.get(vtag)
            if keyword is not None and codec is not None:
                attrs.append(f"{keyword}={_escape(der[vstart:vend].decode(codec, errors='replace'))}")
            else:
                attrs.append(f"{oid}=#{der[vpos:vend].hex()}")
        rdns.append("+".join(attrs))
    return ",".join(reversed(rdns))
