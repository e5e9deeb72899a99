"""The per-connection SASL state machine (Kafka's SaslServerAuthenticator), consulted by the dispatcher.

A connection accepted on a SASL listener carries one :class:`SaslAuthenticator` (``conn.sasl``); on
other listeners ``conn.sasl`` is None and the dispatcher's gate costs one attribute test. It runs on
the handler loop, before any handler: ``intercept`` returns True when it consumed the frame.

States and rules (Kafka's):
1. HANDSHAKE_OR_VERSIONS: ApiVersions (answered by the normal handler; then HANDSHAKE) or
   SaslHandshake. HANDSHAKE: SaslHandshake only. Any other request before the handshake closes the
   connection without an answer (Kafka: InvalidRequestException "Unexpected Kafka request of type X
   during SASL handshake"), as does a second ApiVersions.
2. SaslHandshake (v0 or v1) naming an enabled mechanism answers NONE with the enabled list and moves
   to AUTHENTICATE; another mechanism answers UNSUPPORTED_SASL_MECHANISM with the list, then closes.
3. AUTHENTICATE after a v1 handshake: SaslAuthenticate tokens go to the mechanism's server
   (plain.py, scram.py). Another API is answered with its error response carrying
   ILLEGAL_SASL_STATE where it has one, then the connection closes. A failure answers
   SASL_AUTHENTICATION_FAILED with the mechanism's message (or Kafka's generic one) and closes.
   After a v0 handshake (clients before KIP-152, Kafka 0.10.0-1.0) every frame is a bare SASL
   token, and each answer a bare size-prefixed token (an empty one too: PLAIN's), without Kafka
   headers (Kafka's SaslServerAuthenticator without "Kafka SASL authenticate headers"). A failure
   has no answer to carry it: the connection closes, after the delay of rule 4 for a refused
   credential (an AuthenticationException in Kafka), at once for a malformed exchange.
4. Every failure's answer, and the close, wait ``connection.failed.authentication.delay.ms``
   (Kafka delays both, to slow password guessing); the failure is logged with the client address,
   at most ``_FAILURE_LOG_PER_SECOND`` lines a second (the rest are counted), never with a secret.
5. Success sets ``conn.principal`` to User:<name> and lifts the pre-authentication frame bound
   (``sasl.server.max.receive.size``, enforced by the connection's framing) back to
   ``socket.request.max.bytes``. The answer (v1+) carries ``session_lifetime_ms`` =
   ``connections.max.reauth.ms`` (KIP-368).
6. COMPLETE with a session lifetime: a SaslHandshake (from a client that used SaslAuthenticate
   v1+, at most once a second) starts re-authentication with the same mechanism and must end with
   the same principal; any other request after expiry closes the connection (Kafka's "expired
   channel"). Without a lifetime every request goes straight to the handlers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from odradek.broker.security.principal import KafkaPrincipal
from odradek.broker.security.sasl.mechanism import SaslAuthenticationError, SaslError, SaslServer
from odradek.broker.security.sasl.oauthbearer import OAUTHBEARER, OAuthBearerSaslServer, UnsecuredJwsValidator
from odradek.broker.security.sasl.plain import PLAIN, PlainSaslServer
from odradek.broker.security.sasl.scram import CredentialLookup, ScramSaslServer
from odradek.broker.security.sasl.scram_formatter import MECHANISMS_BY_NAME
from odradek.broker.security.sasl.settings import SaslListenerSettings
from odradek.protocol import primitives as P
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import API_VERSIONS_KEY, decode_request_header
from odradek.protocol.primitives import DecodeError
from odradek.protocol.response_frame import encode_response

if TYPE_CHECKING:
    from odradek.broker.api.registry import HandlerSpec
    from odradek.broker.api.request_types import ClientSession


class Connection(Protocol):
    """What the authenticator reads and sets of the client connection it guards
    (broker/network/connection.py's Connection, which holds it as ``conn.sasl``)."""

    peer: str
    listener: str
    principal: KafkaPrincipal
    max_request_size: int

    def close_threadsafe(self, after_flush: bool = False) -> None: ...


class Dispatcher(Protocol):
    """What the authenticator uses of the dispatcher, whose first step it is (broker/api/dispatcher.py):
    the registry (ApiVersions and the error answers of other APIs), sending a response, closing.
    The connection goes back to the dispatcher as the dispatcher handed it over (``Any`` here)."""

    @property
    def handlers(self) -> Mapping[int, HandlerSpec]: ...

    def send(self, conn: Any, slot: Any, chunks: list[Any] | None) -> None: ...

    def close(self, conn: Any) -> None: ...

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)
_FAILURE_LOG_PER_SECOND = 10
# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS.
_MIN_REAUTH_INTERVAL_S = 1.0

HANDSHAKE_OR_VERSIONS, HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = range(5)


class _FailureLog:
    """Rate-limited INFO lines about failed authentications (handler loop only, so no lock)."""

    def __init__(self) -> None:
        self.window = 0.0
        self.logged = 0
        self.suppressed = 0

    def failed(self, peer: str, listener: str, message: str) -> None:
        now = time.monotonic()
        if now - self.window >= 1.0:
            if self.suppressed:
                log.info("%d more failed authentication(s) not logged in the last second", self.suppressed)
            self.window, self.logged, self.suppressed = now, 0, 0
        if self.logged < _FAILURE_LOG_PER_SECOND:
            self.logged += 1
            log.info("Failed authentication with %s on listener %s (%s)", peer, listener, message)
        else:
            self.suppressed += 1


FAILURE_LOG = _FailureLog()


class _ErrorRequest:
    """The request as a handler's ``error_response`` sees it (an ApiRequest), for answering
    ILLEGAL_SASL_STATE."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body: dict[str, Any], conn: Connection) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body = body
        self.session = cast("ClientSession", conn)  # the real connection; error_response reads none of it
        self.principal = conn.principal
        self.peer = conn.peer
        self.listener = conn.listener
        self.received_at = time.monotonic()


class SaslAuthenticator:
    def __init__(self, settings: SaslListenerSettings, credentials: CredentialLookup, max_request_size: int) -> None:
        self.settings = settings
        self._credentials = credentials
        self._max_request_size = max_request_size
        self.state = HANDSHAKE_OR_VERSIONS
        self._server: SaslServer | None = None
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        # time.monotonic() when the session ends (connections.max.reauth.ms); None: never.
        self.session_expires: float | None = None
        self._supports_reauth = False
        self._reauthenticating = False
        # The handshake was v0: the SASL tokens that follow are bare frames (module docstring, rule 3).
        self._bare_tokens = False
        self._last_reauth_start = 0.0

    def on_connection(self, conn: Connection) -> None:
        """Called when the connection is made: bound pre-authentication frames."""
        conn.max_request_size = min(self._max_request_size, self.settings.max_receive_size)

    # -- the dispatcher's gate ----------------------------------------------------------------------

    def intercept(self, dispatcher: Dispatcher, conn: Connection, slot: Any, frame: bytes | memoryview) -> bool:
        """True when the frame was handled here (answered, or the connection closed)."""
        state = self.state
        if state == COMPLETE:
            expires = self.session_expires
            if expires is None:
                return False
            api_key = P.INT16.unpack_from(frame, 0)[0] if len(frame) >= 2 else -1
            now = time.monotonic()
            if api_key == SASL_HANDSHAKE_KEY and self._supports_reauth \
                    and now - self._last_reauth_start >= _MIN_REAUTH_INTERVAL_S:
                self._last_reauth_start = now
                self._reauthenticating = True
                self.state = HANDSHAKE
                return self._handshake(dispatcher, conn, slot, frame)
            if now >= expires:
                log.info("closing %s: its SASL session expired (connections.max.reauth.ms=%d) and it did not "
                         "re-authenticate", conn.peer, self.settings.max_reauth_ms)
                self._close_now(dispatcher, conn)
                return True
            return False
        if state == FAILED:
            return True  # the connection is closing; nothing more is read from it
        if state == AUTHENTICATE and self._bare_tokens:
            return self._authenticate_bare(dispatcher, conn, slot, frame)  # any bytes, even none
        try:
            api_key = P.INT16.unpack_from(frame, 0)[0]
        except Exception:
            self._close_now(dispatcher, conn)
            return True
        if state == AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE_KEY:
                return self._authenticate(dispatcher, conn, slot, frame)
            return self._illegal_state(dispatcher, conn, slot, frame, api_key)
        if api_key == SASL_HANDSHAKE_KEY:
            return self._handshake(dispatcher, conn, slot, frame)
        if api_key == API_VERSIONS_KEY and state == HANDSHAKE_OR_VERSIONS:
            spec = dispatcher.handlers.get(API_VERSIONS_KEY)
            version = P.INT16.unpack_from(frame, 2)[0] if len(frame) >= 4 else -1
            if spec is not None and spec.supports(version):
                self.state = HANDSHAKE  # an unsupported version is answered and may be retried
            return False
        log.info("closing %s: unexpected Kafka request of type %d during SASL handshake on listener %s",
                 conn.peer, api_key, self.settings.listener)
        self._close_now(dispatcher, conn)
        return True

    # -- steps ----------------------------------------------------------------------------------------

    def _decode(self, dispatcher: Dispatcher, conn: Connection, frame: bytes | memoryview, schema: str,
                versions: tuple[int, int]) -> tuple[Any, dict[str, Any]] | None:
        view = memoryview(frame)
        try:
            api_version = P.INT16.unpack_from(frame, 2)[0]
            if not versions[0] <= api_version <= versions[1]:
                raise DecodeError(f"{schema} v{api_version} not supported ({versions[0]}-{versions[1]})")
            header = decode_request_header(view, is_flexible(schema, api_version))
            body, _ = codec(schema, api_version).decode(view, header.body_offset)
            return header, body
        except (DecodeError, ValueError, IndexError) as exc:
            log.info("closing %s: malformed %s during SASL authentication: %s", conn.peer, schema[:-7], exc)
            self._close_now(dispatcher, conn)
            return None

    def _handshake(self, dispatcher: Dispatcher, conn: Connection, slot: Any, frame: bytes | memoryview) -> bool:
        decoded = self._decode(dispatcher, conn, frame, "SaslHandshakeRequest", HANDSHAKE_VERSIONS)
        if decoded is None:
            return True
        header, body = decoded
        mechanism = body["mechanism"]
        enabled = list(self.settings.mechanisms)
        self._bare_tokens = header.api_version == 0
        if self._reauthenticating and mechanism != self.mechanism:
            # Kafka answers the handshake, then fails the next SaslAuthenticate (REAUTH_BAD_MECHANISM).
            self._send(dispatcher, conn, slot, "SaslHandshakeResponse", header,
                       {"error_code": ErrorCode.NONE, "mechanisms": enabled})
            self._server = None
            self._bad_reauth_mechanism = mechanism
            self.state = AUTHENTICATE
            return True
        if mechanism not in enabled:
            self._fail(dispatcher, conn, slot, "SaslHandshakeResponse", header,
                       {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled},
                       f"Unsupported SASL mechanism {mechanism}")
            return True
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = AUTHENTICATE
        self._send(dispatcher, conn, slot, "SaslHandshakeResponse", header,
                   {"error_code": ErrorCode.NONE, "mechanisms": enabled})
        return True

    def _new_server(self, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainSaslServer(self.settings.plain_users)
        if mechanism == OAUTHBEARER:
            return OAuthBearerSaslServer(UnsecuredJwsValidator(self.settings.jaas_options.get(OAUTHBEARER, {})))
        return ScramSaslServer(MECHANISMS_BY_NAME[mechanism], self._credentials)

    def _authenticate(self, dispatcher: Dispatcher, conn: Connection, slot: Any, frame: bytes | memoryview) -> bool:
        decoded = self._decode(dispatcher, conn, frame, "SaslAuthenticateRequest", AUTHENTICATE_VERSIONS)
        if decoded is None:
            return True
        header, body = decoded
        if header.api_version > 0:
            self._supports_reauth = True
        text = "re-authentication" if self._reauthenticating else "authentication"
        server = self._server
        if server is None:  # re-authentication asked for another mechanism
            bad = getattr(self, "_bad_reauth_mechanism", "?")
            message = (f"SASL mechanism '{bad}' requested by client is not supported for re-authentication of "
                       f"mechanism '{self.mechanism}'")
            self._fail_authenticate(dispatcher, conn, slot, header, message)
            return True
        try:
            challenge = server.evaluate(bytes(body["auth_bytes"]))
        except SaslAuthenticationError as exc:
            self._fail_authenticate(dispatcher, conn, slot, header, str(exc))
            return True
        except SaslError as exc:
            log.debug("SASL %s of %s failed: %s", server.mechanism, conn.peer, exc)
            self._fail_authenticate(dispatcher, conn, slot, header,
                                    f"Authentication failed during {text} due to invalid credentials with SASL "
                                    f"mechanism {server.mechanism}")
            return True
        lifetime_ms = 0
        if server.complete:
            completed = self._complete(conn, server)
            if isinstance(completed, str):
                self._fail_authenticate(dispatcher, conn, slot, header, completed)
                return True
            lifetime_ms = completed
        self._send(dispatcher, conn, slot, "SaslAuthenticateResponse", header,
                   {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": challenge,
                    "session_lifetime_ms": lifetime_ms})
        return True

    def _authenticate_bare(self, dispatcher: Dispatcher, conn: Connection, slot: Any,
                           frame: bytes | memoryview) -> bool:
        """One bare SASL token after a v0 handshake (rule 3): the answer is the server's token,
        size-prefixed, with no Kafka header; a failure closes the connection without one."""
        server = self._server
        if server is None:  # re-authentication asked for another mechanism
            bad = getattr(self, "_bad_reauth_mechanism", "?")
            self._fail_bare(dispatcher, conn, f"SASL mechanism '{bad}' requested by client is not supported for "
                                             f"re-authentication of mechanism '{self.mechanism}'")
            return True
        try:
            challenge = server.evaluate(bytes(frame))
        except SaslAuthenticationError as exc:
            self._fail_bare(dispatcher, conn, str(exc))
            return True
        except SaslError as exc:
            # Kafka: a SaslException from a bare exchange is an I/O failure, closed at once.
            FAILURE_LOG.failed(conn.peer, self.settings.listener, f"SASL {server.mechanism} exchange failed: {exc}")
            self._close_now(dispatcher, conn)
            return True
        if server.complete:
            completed = self._complete(conn, server)
            if isinstance(completed, str):
                self._fail_bare(dispatcher, conn, completed)
                return True
        dispatcher.send(conn, slot, [P.INT32.pack(len(challenge)) + challenge])
        return True

    def _complete(self, conn: Connection, server: SaslServer) -> int | str:
        """The exchange succeeded: the connection's principal and session (rule 5). Returns the
        session lifetime in ms, or the failure message when a re-authentication changed principal."""
        principal = KafkaPrincipal("User", server.authorization_id)
        if self._reauthenticating and principal != self.principal:
            assert self.principal is not None
            return (f"Cannot change principals during re-authentication from {self.principal.principal_type}."
                    f"{self.principal.name}: {principal.principal_type}.{principal.name}")
        lifetime_ms = self.settings.max_reauth_ms
        # Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: a credential that expires (an
        # OAUTHBEARER token's exp) bounds the session too.
        expiration_ms = getattr(server, "credential_expiration_ms", None)
        if expiration_ms is not None:
            remaining = max(0, int(expiration_ms - time.time() * 1000))
            lifetime_ms = remaining if lifetime_ms <= 0 else min(lifetime_ms, remaining)
            self.session_expires = time.monotonic() + lifetime_ms / 1000
        else:
            self.session_expires = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        self.principal = principal
        conn.principal = principal
        conn.max_request_size = self._max_request_size
        self.state = COMPLETE
        self._reauthenticating = False
        self._server = None
        log.debug("%s authenticated as %s with %s on listener %s", conn.peer, principal, server.mechanism,
                  self.settings.listener)
        return lifetime_ms

    def _illegal_state(self, dispatcher: Dispatcher, conn: Connection, slot: Any, frame: bytes | memoryview, api_key: int) -> bool:
        spec = dispatcher.handlers.get(api_key)
        name = spec.name if spec is not None else str(api_key)
        message = f"Unexpected Kafka request of type {name} during SASL authentication."
        body: dict[str, Any] | None = None
        decoded = None
        if spec is not None and spec.error_response is not None:
            version = P.INT16.unpack_from(frame, 2)[0] if len(frame) >= 4 else -1
            if spec.supports(version):
                decoded = self._decode(dispatcher, conn, frame, spec.request_schema, (version, version))
                if decoded is None:
                    return True
                header, request_body = decoded
                try:
                    body = spec.error_response(
                        _ErrorRequest(api_key, version, header.correlation_id, header.client_id, request_body, conn),
                        ErrorCode.ILLEGAL_SASL_STATE)
                except Exception:
                    body = None
        if body is None or decoded is None:
            FAILURE_LOG.failed(conn.peer, self.settings.listener, message)
            self._close_now(dispatcher, conn)
            return True
        self._fail(dispatcher, conn, slot, spec.response_schema, decoded[0], body, message)  # type: ignore[union-attr]
        return True

    # -- answers -------------------------------------------------------------------------------------

    def _fail_authenticate(self, dispatcher: Dispatcher, conn: Connection, slot: Any, header: Any,
                           message: str) -> None:
        self._fail(dispatcher, conn, slot, "SaslAuthenticateResponse", header,
                   {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b"",
                    "session_lifetime_ms": 0}, message)

    def _fail_bare(self, dispatcher: Dispatcher, conn: Connection, message: str) -> None:
        """A refused credential in a bare exchange: no answer can carry it, so the connection
        closes after the failed-authentication delay (rule 4), as Kafka's does."""
        self.state = FAILED
        self._server = None
        FAILURE_LOG.failed(conn.peer, self.settings.listener, message)
        delay = self.settings.failed_authentication_delay_ms / 1000
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, dispatcher.close, conn)
        else:
            dispatcher.close(conn)

    def _fail(self, dispatcher: Dispatcher, conn: Connection, slot: Any, schema: str, header: Any, body: dict[str, Any],
              message: str) -> None:
        """Answer after the failed-authentication delay, then close (rule 4)."""
        self.state = FAILED
        self._server = None
        FAILURE_LOG.failed(conn.peer, self.settings.listener, message)
        delay = self.settings.failed_authentication_delay_ms / 1000

        def answer() -> None:
            self._send(dispatcher, conn, slot, schema, header, body)
            conn.close_threadsafe(after_flush=True)

        if delay > 0:
            asyncio.get_running_loop().call_later(delay, answer)
        else:
            answer()

    def _send(self, dispatcher: Dispatcher, conn: Connection, slot: Any, schema: str, header: Any,
              body: dict[str, Any]) -> None:
        flexible = is_flexible(schema, header.api_version)
        chunks = encode_response(schema, header.api_version, header.correlation_id, body, flexible)
        dispatcher.send(conn, slot, chunks)

    def _close_now(self, dispatcher: Dispatcher, conn: Connection) -> None:
        self.state = FAILED
        self._server = None
        dispatcher.close(conn)


def authenticator_factory(settings: SaslListenerSettings, credentials: CredentialLookup,
                          max_request_size: int) -> Callable[[], SaslAuthenticator]:
    return lambda: SaslAuthenticator(settings, credentials, max_request_size)
