"""TLS for SSL and SASL_SSL listeners and for the inter-broker client: Kafka's ssl.* keys -> SSLContext.

Key resolution, as Kafka's ``valuesWithPrefixOverride(listenerName.configPrefix)``: for listener
``NAME`` each ``ssl.X`` comes from ``listener.name.<name>.ssl.X`` (listener name lower-cased) when
that is set, else from ``ssl.X``. The inter-broker client uses the inter-broker listener's values.

Key material (Kafka's DefaultSslEngineFactory; every fault is a ConfigError naming the key, raised
while the configuration is loaded (odradek.broker.config.broker_config.load_config), so a broker with bad material never starts):

- ``ssl.keystore.type``: ``PEM`` — ``ssl.keystore.location`` is a file holding the private key and
  the certificate chain, or ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` hold them
  inline; an encrypted key is decrypted with ``ssl.key.password``. ``PKCS12`` — the file at
  ``ssl.keystore.location`` opened with ``ssl.keystore.password`` (needs the ``cryptography``
  package). ``JKS`` (Kafka's default type) is refused: no maintained Python library reads it;
  ``keytool -importkeystore -deststoretype PKCS12`` converts one.
- ``ssl.truststore.type``: ``PEM`` (``ssl.truststore.location`` or inline
  ``ssl.truststore.certificates``) or ``PKCS12``; without a truststore the system's CAs are trusted
  (Kafka falls back to the JVM's cacerts).
- ``ssl.client.auth`` none/requested/required -> CERT_NONE/CERT_OPTIONAL/CERT_REQUIRED; on a
  SASL_SSL listener only its listener-prefixed form counts (KIP-684), as in Kafka.
- ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) bound the versions; ``ssl.protocol=TLSv1.2`` caps
  them at 1.2 as a Java SSLContext of that protocol does.
- ``ssl.cipher.suites``: Java/IANA names (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``) or OpenSSL
  names; they restrict TLS 1.2. Python's ssl module cannot restrict TLS 1.3 suites: TLS 1.3 names
  are checked and otherwise every TLS 1.3 suite OpenSSL offers stays on.

Private keys never touch the disk: Python's ``load_cert_chain`` reads only files, so inline or
converted material goes through an anonymous memory file (``memfd_create``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.broker.config.errors import ConfigError

# The ssl.* keys a listener prefix may override (Kafka's SSL configs that reach the SslFactory).
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.protocol", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
)
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                 "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_prefix(listener: str) -> str:
    return f"listener.name.{listener.lower()}."


def resolve(config: Any, listener: str) -> dict[str, Any]:
    """The ssl.* values for ``listener`` (prefixed override, else the broker-wide key), typed."""
    prefix = listener_prefix(listener)
    out: dict[str, Any] = {}
    for key in SSL_KEYS:
        raw = config.originals.get(prefix + key)
        if raw is not None:
            out[key] = config.definitions[key].parse(raw)
            out["@" + key] = prefix + key  # which key the value came from, for error messages
        else:
            out[key] = config[key]
            out["@" + key] = key
    return out


def is_tls(protocol: str) -> bool:
    return protocol in TLS_PROTOCOLS


@dataclass(frozen=True)
class ListenerTls:
    """A TLS listener's server context and the principal mapping for its client certificates."""

    context: ssl.SSLContext
    mapping_rules: str


def server_tls(config: Any, listener: str) -> ListenerTls:
    """The server side of ``listener`` (SSL or SASL_SSL); ConfigError naming the key on any fault."""
    v = resolve(config, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions_and_ciphers(ctx, v)
    if not _load_keystore(ctx, v):
        raise ConfigError(
            f"Listener {listener} uses TLS but has no key store: set {v['@ssl.keystore.location']} (with "
            f"ssl.keystore.type PEM or PKCS12), or {v['@ssl.keystore.key']} and "
            f"{v['@ssl.keystore.certificate.chain']} (ssl.keystore.type=PEM)")
    auth = v["ssl.client.auth"]
    if config.listener_security_protocol_map.get(listener) == "SASL_SSL" and v["@ssl.client.auth"] == "ssl.client.auth":
        auth = "none"  # KIP-684: on SASL_SSL only listener.name.<name>.ssl.client.auth asks for certificates
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(ctx, v)
    rules = v["ssl.principal.mapping.rules"]
    from odradek.broker.security.ssl_principal_mapper import SslPrincipalMapper

    try:
        SslPrincipalMapper(rules)
    except ValueError as exc:
        raise ConfigError(f"Invalid value {rules!r} for configuration {v['@ssl.principal.mapping.rules']}: "
                          f"{exc}") from None
    return ListenerTls(ctx, rules)


@dataclass(frozen=True)
class ClientTls:
    """How this broker connects to another broker's TLS listener."""

    context: ssl.SSLContext
    verify_hostname: bool


def client_tls(config: Any, listener: str) -> ClientTls:
    """The client side for connecting to ``listener`` (the inter-broker listener) of other brokers:
    its truststore verifies them, its keystore (when set) answers a client-auth request,
    ``ssl.endpoint.identification.algorithm=https`` (the default) checks their host names."""
    v = resolve(config, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions_and_ciphers(ctx, v)
    _load_keystore(ctx, v)
    _load_truststore(ctx, v)
    algorithm = (v["ssl.endpoint.identification.algorithm"] or "").strip()
    if algorithm.lower() not in ("", "https"):
        raise ConfigError(f"Invalid value {algorithm!r} for configuration "
                          f"{v['@ssl.endpoint.identification.algorithm']}: expected https or empty")
    ctx.check_hostname = bool(algorithm)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ClientTls(ctx, bool(algorithm))


def inter_broker_client_tls(config: Any) -> ClientTls | None:
    """How this broker's NodeClients connect to others: TLS when the inter-broker listener uses it."""
    inter = config.inter_broker_listener_name
    proto = config.listener_security_protocol_map.get(inter)
    return client_tls(config, inter) if proto is not None and is_tls(proto) else None


def check_listeners(config: Any) -> None:
    """Build every TLS listener's context once when the configuration is loaded (ConfigError on any fault)."""
    for lst in config.listeners:
        if is_tls(lst.security_protocol):
            server_tls(config, lst.name)
    inter_broker_client_tls(config)


# -- versions and ciphers ---------------------------------------------------------------------------

def _versions_and_ciphers(ctx: ssl.SSLContext, v: Mapping[str, Any]) -> None:
    enabled = v["ssl.enabled.protocols"]
    bad = [p for p in enabled if p not in _VERSIONS]
    if bad or not enabled:
        raise ConfigError(f"Invalid value {','.join(enabled)!r} for configuration {v['@ssl.enabled.protocols']}: "
                          f"supported protocols are {', '.join(_VERSIONS)}" + (f" (not {', '.join(bad)})" if bad else ""))
    protocol = v["ssl.protocol"]
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise ConfigError(f"Invalid value {protocol!r} for configuration {v['@ssl.protocol']}: expected "
                          "TLSv1.3, TLSv1.2 or TLS")
    versions = sorted(_VERSIONS[p] for p in enabled)
    if protocol == "TLSv1.2":
        versions = [x for x in versions if x <= ssl.TLSVersion.TLSv1_2]
        if not versions:
            raise ConfigError(f"{v['@ssl.protocol']}=TLSv1.2 leaves none of {v['@ssl.enabled.protocols']} "
                              f"({','.join(enabled)}) usable")
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]
    suites = v["ssl.cipher.suites"]
    if suites:
        available = {c["name"] for c in ctx.get_ciphers()}
        names12 = []
        for suite in suites:
            if suite in _TLS13_SUITES:
                continue
            name = suite if suite in available else _openssl_name(suite)
            if name not in available:
                raise ConfigError(f"Invalid value {','.join(suites)!r} for configuration {v['@ssl.cipher.suites']}: "
                                  f"unknown or unavailable cipher suite {suite}")
            names12.append(name)
        if names12:
            ctx.set_ciphers(":".join(names12))
        elif ssl.TLSVersion.TLSv1_3 not in versions:
            raise ConfigError(f"{v['@ssl.cipher.suites']} names only TLS 1.3 suites but TLSv1.3 is not enabled")
        else:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # TLS 1.3 suites only: no TLS 1.2 handshake


def _openssl_name(iana: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`` -> ``ECDHE-RSA-AES256-GCM-SHA384`` (OpenSSL's name)."""
    name = iana.removeprefix("TLS_").replace("_WITH_", "_")
    name = name.replace("AES_128", "AES128").replace("AES_256", "AES256")
    name = name.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    return name.replace("_", "-")


# -- key and trust material -------------------------------------------------------------------------

def _read(v: Mapping[str, Any], key: str) -> bytes:
    path = v[key]
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"Cannot read {v['@' + key]}={path!r}: {exc.strerror or exc}") from None


def _store_type(v: Mapping[str, Any], key: str) -> str:
    kind = (v[key] or "").upper()
    if kind == "JKS":
        raise ConfigError(f"{v['@' + key]}=JKS is not supported (JKS is Kafka's default type): set {v['@' + key]} "
                          "to PEM or PKCS12 (keytool -importkeystore -deststoretype PKCS12 converts a JKS store)")
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"Invalid value {v[key]!r} for configuration {v['@' + key]}: expected PEM or PKCS12")
    return kind


def _load_keystore(ctx: ssl.SSLContext, v: Mapping[str, Any]) -> bool:
    """Load the key store into ``ctx``; False when none is configured."""
    location, key, chain = v["ssl.keystore.location"], v["ssl.keystore.key"], v["ssl.keystore.certificate.chain"]
    if not (location or key or chain):
        return False
    kind = _store_type(v, "ssl.keystore.type")
    if location and (key or chain):
        raise ConfigError(f"Set either {v['@ssl.keystore.location']} or {v['@ssl.keystore.key']} and "
                          f"{v['@ssl.keystore.certificate.chain']}, not both")
    if kind == "PKCS12":
        if not location:
            raise ConfigError(f"{v['@ssl.keystore.type']}=PKCS12 needs {v['@ssl.keystore.location']}; "
                              f"{v['@ssl.keystore.key']} is for PEM")
        pem = _pkcs12_to_pem(_read(v, "ssl.keystore.location"), v["ssl.keystore.password"],
                             v["@ssl.keystore.location"], v["@ssl.keystore.password"])
        password = None
        where = v["@ssl.keystore.location"]
    elif location:
        pem = _read(v, "ssl.keystore.location")
        password = v["ssl.key.password"] or v["ssl.keystore.password"]
        where = v["@ssl.keystore.location"]
    else:
        if not (key and chain):
            missing = v["@ssl.keystore.key"] if not key else v["@ssl.keystore.certificate.chain"]
            raise ConfigError(f"{missing} must be set too: an inline PEM key store needs both "
                              f"{v['@ssl.keystore.key']} and {v['@ssl.keystore.certificate.chain']}")
        pem = (key.strip() + "\n" + chain.strip() + "\n").encode()
        password = v["ssl.key.password"]
        where = f"{v['@ssl.keystore.key']} / {v['@ssl.keystore.certificate.chain']}"
    if b"PRIVATE KEY-----" not in pem:
        raise ConfigError(f"{where}: no PEM private key found")
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"{where}: no PEM certificate found")
    with _memory_file(pem) as path:
        try:
            ctx.load_cert_chain(path, password=password or None)
        except ssl.SSLError as exc:
            hint = f" (is {v['@ssl.key.password']} right?)" if b"ENCRYPTED" in pem else ""
            raise ConfigError(f"{where}: cannot load the private key and certificate chain: "
                              f"{exc.reason or exc}{hint}") from None
    return True


def _load_truststore(ctx: ssl.SSLContext, v: Mapping[str, Any]) -> None:
    location, inline = v["ssl.truststore.location"], v["ssl.truststore.certificates"]
    if not (location or inline):
        ctx.load_default_certs()
        return
    kind = _store_type(v, "ssl.truststore.type")
    if location and inline:
        raise ConfigError(f"Set either {v['@ssl.truststore.location']} or {v['@ssl.truststore.certificates']}, "
                          "not both")
    if kind == "PKCS12":
        if not location:
            raise ConfigError(f"{v['@ssl.truststore.type']}=PKCS12 needs {v['@ssl.truststore.location']}")
        pem = _pkcs12_to_pem(_read(v, "ssl.truststore.location"), v["ssl.truststore.password"],
                             v["@ssl.truststore.location"], v["@ssl.truststore.password"], certificates_only=True)
        where = v["@ssl.truststore.location"]
    elif location:
        pem = _read(v, "ssl.truststore.location")
        where = v["@ssl.truststore.location"]
    else:
        pem = inline.encode()
        where = v["@ssl.truststore.certificates"]
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"{where}: no PEM certificate found")
    try:
        ctx.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: cannot load the trusted certificates: {exc.reason or exc}") from None


def _pkcs12_to_pem(data: bytes, password: str | None, where: str, password_key: str,
                   certificates_only: bool = False) -> bytes:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(f"{where}: PKCS12 stores need the 'cryptography' package (pip install cryptography); "
                          "or convert the store to PEM") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(f"{where}: cannot open the PKCS12 store (is {password_key} right?): {exc}") from None
    certs = ([cert] if cert is not None else []) + list(extra or [])
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    if not certificates_only:
        if key is None:
            raise ConfigError(f"{where}: the PKCS12 store holds no private key")
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()) + pem
    return pem


@contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path whose file holds ``data`` only in memory (Linux memfd); a private temp file elsewhere."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("odradek-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        yield path


# -- the inter-broker client's TLS ------------------------------------------------------------------
# One broker per process (the daemon): Broker.start sets how its NodeClients reach other brokers'
# inter-broker listener, and odradek.broker.network.inter_broker_client reads it when connecting. None: plaintext.
_inter_broker: ClientTls | None = None


def set_inter_broker_tls(tls: ClientTls | None) -> None:
    global _inter_broker
    _inter_broker = tls


def inter_broker_tls() -> ClientTls | None:
    return _inter_broker
