"""SASL/OAUTHBEARER's server side (RFC 7628, KIP-255) with Kafka's default validator: unsecured JWS.

Kafka's OAuthBearerSaslServer and OAuthBearerUnsecuredValidatorCallbackHandler (no signature: for
development and tests, exactly what Kafka ships as its default):

1. The client's initial response is ``n,[a=<authzid>],`` ^A ``auth=Bearer <token>`` ^A (``key=value`` ^A)*
   ^A. Anything else fails with Kafka's generic message.
2. The token is an unsecured JWS: ``base64url(header).base64url(claims).`` (empty signature), the
   header's ``alg`` is ``none``. Claims: the principal claim (``sub``, or the option
   ``unsecuredValidatorPrincipalClaimName``) a non-empty string; ``exp`` a number (seconds) not in
   the past; ``iat`` optional, not in the future and before ``exp``; all with
   ``unsecuredValidatorAllowableClockSkewMs`` slack. ``unsecuredValidatorRequiredScope`` (a
   comma-separated list) must be contained in the scope claim (``scope`` or
   ``unsecuredValidatorScopeClaimName``; a string of space-separated scopes or a list).
3. A token that fails validation is answered with the challenge ``{"status":"invalid_token"}``
   (``insufficient_scope`` and ``"scope"`` for a missing scope); the client answers ^A and the exchange
   fails with that JSON as the message (SASL_AUTHENTICATION_FAILED), as in Kafka. The reason is logged
   at DEBUG only.
4. Success: the principal is the claim's value; an authorization id must equal it. The token's
   ``exp`` bounds the session (KIP-368: the session lifetime is the smaller of it and
   ``connections.max.reauth.ms``). Extensions are accepted unvalidated (Kafka's unsecured handler).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from odradek.broker.security.sasl.mechanism import SaslAuthenticationError, SaslError

log = logging.getLogger(__name__)

OAUTHBEARER = "OAUTHBEARER"
_INITIAL = re.compile(r"n,(?:a=(?P<authzid>(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,\x01"
                      r"(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class _Invalid(Exception):
    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


def _b64url_json(part: str) -> Any:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        return json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise _Invalid(f"not base64url-encoded JSON: {exc}") from None


class UnsecuredJwsValidator:
    """The options of the listener's OAuthBearerLoginModule JAAS entry, Kafka's names."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        self.required_scope = [s.strip() for s in options.get("unsecuredValidatorRequiredScope", "").split(",")
                               if s.strip()]
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip()
        self.clock_skew_ms = int(skew) if skew else 0

    def validate(self, token: str, now_ms: float) -> tuple[str, float]:
        """(principal, expiration in epoch ms); _Invalid with the reason."""
        parts = token.split(".")
        if len(parts) != 3:
            raise _Invalid(f"an unsecured JWS has 3 dot-separated parts, got {len(parts)}")
        if parts[2]:
            raise _Invalid("the signature part of an unsecured JWS must be empty")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise _Invalid("header and claims must be JSON objects")
        if header.get("alg") != "none":
            raise _Invalid(f"unsecured JWS must have alg none, got {header.get('alg')!r}")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise _Invalid(f"required claim {self.principal_claim!r} missing or not a non-empty string")
        exp = claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            raise _Invalid("required claim 'exp' missing or not a number")
        exp_ms = exp * 1000
        if now_ms - self.clock_skew_ms >= exp_ms:
            raise _Invalid(f"the token expired at {exp_ms:.0f} ms (now {now_ms:.0f} ms)")
        iat = claims.get("iat")
        if iat is not None:
            if isinstance(iat, bool) or not isinstance(iat, int | float):
                raise _Invalid("claim 'iat' is not a number")
            if iat * 1000 > now_ms + self.clock_skew_ms:
                raise _Invalid("the token was issued in the future")
            if exp <= iat:
                raise _Invalid("'exp' is not after 'iat'")
        if self.required_scope:
            raw_scope = claims.get(self.scope_claim)
            scope = raw_scope.split() if isinstance(raw_scope, str) else raw_scope if isinstance(raw_scope, list) else []
            missing = [s for s in self.required_scope if s not in scope]
            if missing:
                raise _Invalid(f"the provided scope ({scope}) was missing a required scope ({self.required_scope})",
                               scope=",".join(self.required_scope))
        return principal, exp_ms


class OAuthBearerSaslServer:
    mechanism = OAUTHBEARER

    def __init__(self, validator: UnsecuredJwsValidator) -> None:
        self._validator = validator
        self._error: str | None = None
        self._principal: str | None = None
        self.credential_expiration_ms: float | None = None

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def authorization_id(self) -> str:
        assert self._principal is not None
        return self._principal

    def evaluate(self, token: bytes) -> bytes:
        if self._error is not None:
            error, self._error = self._error, None
            if token == b"\x01":
                raise SaslAuthenticationError(error)
            raise SaslError("Received a response other than %x01 after the server's error challenge")
        m = _INITIAL.fullmatch(token.decode("ascii", errors="replace"))
        if m is None:
            raise SaslError("Invalid OAUTHBEARER client first message")
        pairs = dict(kv.split("=", 1) for kv in m["kvpairs"].split("\x01") if kv)
        auth = _AUTH.fullmatch(pairs.get("auth", ""))
        if auth is None or auth["scheme"].lower() != "bearer":
            raise SaslError("Invalid OAUTHBEARER client first message: no Bearer token")
        try:
            principal, exp_ms = self._validator.validate(auth["token"], time.time() * 1000)
        except _Invalid as exc:
            log.debug("OAUTHBEARER token refused: %s", exc)
            body: dict[str, str] = {"status": "insufficient_scope" if exc.scope else "invalid_token"}
            if exc.scope:
                body["scope"] = exc.scope
            self._error = json.dumps(body, separators=(",", ":"))
            return self._error.encode()
        authzid = m["authzid"]
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from "
                f"the token's principal name ({principal})")
        self._principal = principal
        self.credential_expiration_ms = exp_ms
        return b""


def unsecured_token(principal: str, lifetime_s: float = 3600, scope: list[str] | None = None,
                    claims: Mapping[str, Any] | None = None, header: Mapping[str, Any] | None = None) -> str:
    """An unsecured JWS as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes (tests, tools)."""
    now = time.time()
    body: dict[str, Any] = {"sub": principal, "iat": now, "exp": now + lifetime_s}
    if scope is not None:
        body["scope"] = scope
    body.update(claims or {})

    def enc(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{enc(dict(header or {'alg': 'none'}))}.{enc(body)}."


def initial_response(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()
