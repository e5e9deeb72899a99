"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512's server side (RFC 5802/7677), as Kafka's ScramSaslServer.

Exchange (two client messages; Kafka's ScramMessages grammar, ASCII only)::

    client-first  n,[a=<authzid>],n=<saslname>,r=<cnonce>[,<ext>=<value>]*
    server-first  r=<cnonce><snonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<cnonce><snonce>[,<ext>=<value>]*,p=<base64 proof>
    server-final  v=<base64 ServerSignature>

Rules, Kafka's:
1. Only the gs2 header ``n,`` (no channel binding) is accepted; a saslname escapes ``,``/``=`` as
   ``=2C``/``=3D``; an authzid other than the user name fails with a message sent to the client.
2. Unknown extensions are ignored; ``tokenauth=true`` (delegation tokens) is refused, as no tokens
   exist here.
3. A user without a credential for this mechanism, a credential below the mechanism's 4096
   iterations, a changed nonce and a wrong proof all fail with Kafka's generic message (the
   client must not learn which).
4. The server nonce is 130 random bits in base 36 (Kafka's ScramFormatter.secureRandomString).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from collections.abc import Callable

from odradek.broker.security.sasl import scram_formatter as F
from odradek.broker.security.sasl.mechanism import SaslAuthenticationError, SaslError

# Kafka's ScramMessages patterns.
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?:{_EXTENSIONS})),"
    rf"p=(?P<proof>{_BASE64})")
TOKEN_AUTH = "tokenauth"


def username_from_saslname(saslname: str) -> str:
    """``=2C`` -> ``,`` and ``=3D`` -> ``=`` (Kafka's ScramFormatter.username)."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname_from_username(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _extensions(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(",")[1:]:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def secure_random_string() -> str:
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out)) or "0"


# (user name, mechanism) -> the stored credential, or None when the user has none.
CredentialLookup = Callable[[str, str], "F.ScramCredential | None"]


class ScramSaslServer:
    def __init__(self, mechanism: F.ScramMechanism, credentials: CredentialLookup) -> None:
        self.mechanism = mechanism.name
        self._mech = mechanism
        self._credentials = credentials
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: F.ScramCredential | None = None
        self._username: str | None = None

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        assert self._username is not None and self.complete
        return self._username

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._first(token)
            if self._state == "final":
                return self._final(token)
            raise SaslError(f"Unexpected challenge in Sasl server state {self._state}")
        except (SaslError, SaslAuthenticationError):
            self._state = "failed"
            self._credential = None
            raise

    def _first(self, token: bytes) -> bytes:
        message = token.decode("ascii", errors="replace")
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise SaslError("Invalid SCRAM client first message format")
        username = username_from_saslname(m["saslname"])
        extensions = _extensions(m["extensions"])
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise SaslError(f"Token Authentication failed: Invalid tokenId : {username}")
        credential = self._credentials(username, self._mech.name)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        authzid = m["authzid"]
        if authzid and username_from_saslname(authzid) != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self._mech.min_iterations:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum "
                            f"{self._mech.min_iterations} for {self._mech.name}")
        self._username = username
        self._credential = credential
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + secure_random_string()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        message = token.decode("ascii", errors="replace")
        m = _CLIENT_FINAL.fullmatch(message)
        if m is None:
            raise SaslError("Invalid SCRAM client final message format")
        if m["nonce"] != self._nonce:
            raise SaslError("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except (binascii.Error, ValueError):
            raise SaslError("Invalid client final message") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{m['without_proof']}".encode()
        client_signature = F.hmac_digest(self._mech, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslError("Invalid client credentials")
        computed = F.stored_key(self._mech, F.xor(proof, client_signature))
        if not hmac.compare_digest(computed, credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = F.hmac_digest(self._mech, credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)
