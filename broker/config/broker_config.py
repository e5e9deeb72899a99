"""Broker configuration: Kafka's keys, types, defaults and validation, loaded like kafka-server-start.

Sources, lowest precedence first (a later source replaces a key wholesale):

1. defaults — the table :data:`DEFINITIONS`, with Apache Kafka 4.0's defaults (KafkaConfig,
   ServerLogConfigs, SocketServerConfigs, ReplicationConfigs, KRaftConfigs, GroupCoordinatorConfig,
   TransactionLogConfig, TransactionStateManagerConfig, CleanerConfig, LogConfig);
2. the properties file (``odradek server.properties``), Java .properties syntax (odradek.broker.config.properties);
3. the environment, by the convention of Kafka's docker image (``KafkaDockerWrapper``):
   ``KAFKA_<NAME>`` -> strip ``KAFKA_``, lowercase, ``_`` -> ``.``, then ``...`` -> ``-`` and
   ``..`` -> ``_`` — i.e. ``___`` means ``-`` and ``__`` means ``_``. The launcher's own variables
   (:data:`EXCLUDED_ENV`) are skipped. ``CLUSTER_ID`` (the variable Kafka's image formats storage
   with) is read as ``cluster.id`` unless ``KAFKA_CLUSTER_ID`` is set;
4. ``--override key=value`` arguments.

Rules, as in Kafka's ``ConfigDef``/``KafkaConfig``:

- Values are trimmed, then parsed by type: BOOLEAN ``true``/``false`` (any case), INT/SHORT/LONG
  decimal with optional sign in the Java type's range, DOUBLE, STRING, LIST (comma separated, blanks
  around commas dropped, empty string = empty list).
- An unknown key logs a warning naming it and start-up continues (Kafka logs "supplied but not
  used"); it stays in :attr:`BrokerConfig.originals`.
- A Kafka key Odradek accepts but does not act on (the KRaft quorum, Java JSSE tuning, segment
  preallocation, ...) is marked ``no_effect`` in :data:`DEFINITIONS`, with the reason; when any is
  set, one warning at start-up lists them (:func:`warn_keys_without_effect`). Topic keys of that
  kind are marked in storage/log_config.py; tests/unit/broker/test_config_truth.py checks both
  tables against the code that reads them.
- An unparsable or invalid value raises :class:`ConfigError` naming the key, the value and what is
  accepted; so do the cross-key rules in ``_validate`` (listeners, advertised.listeners, node.id,
  log.dirs, retention/roll times, group session bounds). Start-up must stop on it.
- Synonyms: ``broker.id`` and ``node.id`` stand for each other (both set and different is an error);
  ``log.dirs`` wins over ``log.dir``; ``log.retention.{ms,minutes,hours}``, ``log.roll.{ms,hours}``,
  ``log.roll.jitter.{ms,hours}`` and ``log.flush.{interval,scheduler.interval}.ms`` resolve like
  Kafka (most precise unit set wins) — see the ``*_ms`` properties.
- Listeners use Kafka's syntax ``NAME://host:port`` (``[v6addr]`` allowed, empty host = every
  interface), security protocol from ``listener.security.protocol.map``; PLAINTEXT, SSL,
  SASL_PLAINTEXT and SASL_SSL are implemented (:data:`IMPLEMENTED_PROTOCOLS`).
- TLS keys (``ssl.*``, per listener ``listener.name.<name>.ssl.*``) are broker/security/tls.py's;
  :func:`load_config` loads their key material, so bad material stops start-up naming the key.
- SASL keys Odradek implements (``odradek.broker.security.sasl.keys``) are checked by
  ``odradek.broker.security.sasl.settings`` (a SASL listener needing GSSAPI stops start-up).
- Authorization is Kafka's: ``authorizer.class.name`` (empty, or StandardAuthorizer), ``super.users``,
  ``allow.everyone.if.no.acl.found`` (broker/security/authorizer.py).
- Security not implemented yet: any other security setting (other ``sasl.*`` and per-listener sasl
  keys, ``principal.builder.class``) set to a non-empty value is a ConfigError naming every such key
  (:func:`check_no_security`): a broker asked to be secured never starts open.

A :class:`BrokerConfig` is immutable once built, so any thread or loop may read it; dynamic updates
(:meth:`BrokerConfig.with_dynamic`) return a new object which the owner of the running config (the
broker's main loop) swaps in.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import math
import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

from odradek.broker.config.errors import ConfigError
from odradek.broker.config.properties import PropertiesError, load_properties
from odradek.broker.security.sasl.keys import is_implemented_sasl_key, is_sensitive_key
from odradek.broker.security.sasl.settings import SaslConfigError
from odradek.broker.security.sasl.settings import validate as validate_sasl
from odradek.controller.etcd_endpoints import ETCD_SCHEME, parse_etcd_endpoints

__all__ = [
    "check_no_security",
    "ConfigError",
    "ConfigType",
    "ConfigSource",
    "ConfigDef",
    "Range",
    "ValidString",
    "ValidList",
    "Listener",
    "BrokerConfig",
    "DEFINITIONS",
    "CONFIG_DEFS",
    "EXCLUDED_ENV",
    "env_to_config_key",
    "config_from_environ",
    "parse_overrides",
    "parse_listeners",
    "load_config",
    "keys_without_effect",
    "warn_keys_without_effect",
]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)


class ConfigType(Enum):
    BOOLEAN = "boolean"
    SHORT = "short"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"  # a secret: never logged, masked in DescribeConfigs (Kafka's Type.PASSWORD)


class ConfigSource(IntEnum):
    """DescribeConfigs' config source numbers (DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# ---------------------------------------------------------------------------------------------------
# Validators: callables that raise ValueError, and can describe what they accept for error messages.


@dataclass(frozen=True)
class Range:
    """Inclusive numeric range; ``None`` bound = unbounded (Kafka's atLeast / between)."""

    min: float | None = None
    max: float | None = None

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise ValueError(f"value must be {self.describe()}")

    def describe(self) -> str:
        if self.max is None:
            return f"at least {_num(self.min)}"
        if self.min is None:
            return f"at most {_num(self.max)}"
        return f"in [{_num(self.min)}, {_num(self.max)}]"


@dataclass(frozen=True)
class ValidString:
    """The value must be one of ``options`` (Kafka's ValidString.in / CaseInsensitiveValidString)."""

    options: tuple[str, ...]
    case_sensitive: bool = True

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        if self.case_sensitive:
            ok = value in self.options
        else:
            ok = value.lower() in {o.lower() for o in self.options}
        if not ok:
            raise ValueError(f"value must be {self.describe()}")

    def describe(self) -> str:
        return "one of: " + ", ".join(self.options)


@dataclass(frozen=True)
class ValidList:
    """Every list element must be one of ``options`` (Kafka's ValidList.in)."""

    options: tuple[str, ...]

    def __call__(self, value: Any) -> None:
        for item in value or ():
            if item not in self.options:
                raise ValueError(f"'{item}' is not allowed; expected {self.describe()}")

    def describe(self) -> str:
        return "a comma-separated list of: " + ", ".join(self.options)


@dataclass(frozen=True)
class _GzipLevel:
    """Kafka's GzipCompression.LevelValidator: -1 (zlib's default, 6) or a level in [1, 9]."""

    def __call__(self, value: Any) -> None:
        if value is not None and value != -1 and not 1 <= value <= 9:
            raise ValueError(f"value must be {self.describe()}")

    def describe(self) -> str:
        return "-1 or in [1, 9]"


@dataclass(frozen=True)
class _ClusterIdValidator:
    """Kafka cluster ids are Uuid.toString(): 16 bytes in URL-safe base64 without padding (22 chars)."""

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        try:
            raw = base64.urlsafe_b64decode(value + "==")
            ok = len(value) == 22 and len(raw) == 16 and re.fullmatch(r"[A-Za-z0-9_-]{22}", value)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"value must be {self.describe()}")

    def describe(self) -> str:
        return "a Kafka UUID: 22 characters of URL-safe base64, e.g. from `kafka-storage random-uuid`"


def _num(x: float | None) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


Validator = Callable[[Any], None]


@dataclass(frozen=True)
class ConfigDef:
    """One broker config key: Kafka's name, type, typed default (None = unset), validator and docs.

    ``dynamic`` marks keys Kafka can change at runtime (DynamicBrokerConfig) — the ones
    :meth:`BrokerConfig.with_dynamic` accepts. ``no_effect`` says why a key Kafka has is accepted
    (so Kafka's configs load unchanged) but changes nothing in Odradek; empty = the key works. The
    broker warns at start-up about such keys that were set (:func:`warn_keys_without_effect`).
    """

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None = None
    importance: str = "medium"
    doc: str = ""
    dynamic: bool = False
    no_effect: str = ""

    def parse(self, raw: str) -> Any:
        """Parse and validate a raw string; raise ConfigError naming key, value and what is accepted."""
        value = _parse_typed(self, raw)
        if self.validator is not None:
            try:
                self.validator(value)
            except ValueError as e:
                raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: {e}") from None
        return value

    def accepted(self) -> str:
        """Human description of the accepted values, for error messages."""
        base = _TYPE_DESCRIPTIONS[self.type]
        describe = getattr(self.validator, "describe", None)
        if describe is None:
            return base
        if self.type in (ConfigType.STRING, ConfigType.LIST):
            return describe()
        return f"{base}, {describe()}"


_TYPE_DESCRIPTIONS = {
    ConfigType.BOOLEAN: "true or false",
    ConfigType.SHORT: f"an integer in [{SHORT_MIN}, {SHORT_MAX}]",
    ConfigType.INT: f"an integer in [{INT_MIN}, {INT_MAX}]",
    ConfigType.LONG: f"an integer in [{LONG_MIN}, {LONG_MAX}]",
    ConfigType.DOUBLE: "a decimal number",
    ConfigType.STRING: "a string",
    ConfigType.LIST: "a comma-separated list",
    ConfigType.PASSWORD: "a string",
}
_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[dDfF]?")
_INT_BOUNDS = {
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}


def _parse_typed(d: ConfigDef, raw: str) -> Any:
    value = raw.strip()  # Java's ConfigDef.parseType trims every string before parsing
    t = d.type

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"Invalid value {raw!r} for configuration {d.name}: {why}; expected {d.accepted()}"
        )

    if t is ConfigType.BOOLEAN:
        low = value.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise bad("not a boolean")
    if t in _INT_BOUNDS:
        article = "an" if t is ConfigType.INT else "a"
        if not _INT_RE.fullmatch(value):
            raise bad(f"not {article} {t.value}")
        n = int(value)
        lo, hi = _INT_BOUNDS[t]
        if not lo <= n <= hi:
            raise bad(f"out of range for {article} {t.value}")
        return n
    if t is ConfigType.DOUBLE:
        if not _DOUBLE_RE.fullmatch(value):
            raise bad("not a number")
        x = float(value.rstrip("dDfF").replace("Infinity", "inf"))
        if math.isnan(x):
            raise bad("not a number")
        return x
    if t is ConfigType.LIST:
        return [] if value == "" else re.split(r"\s*,\s*", value)
    return value


def format_value(d: ConfigDef, value: Any) -> str | None:
    """Render a typed value as Kafka shows it in DescribeConfigs (None stays None)."""
    if value is None:
        return None
    if d.type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if d.type is ConfigType.LIST:
        return ",".join(value)
    if d.type is ConfigType.DOUBLE:
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(float(value))
    return str(value)


# ---------------------------------------------------------------------------------------------------
# The definitions table. Defaults are Kafka 4.0's; keys prefixed "odradek." are Odradek's own.

_H, _M, _L = "high", "medium", "low"
_B, _S, _I, _LG, _D, _ST, _LI = (
    ConfigType.BOOLEAN,
    ConfigType.SHORT,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.STRING,
    ConfigType.LIST,
)
_PW = ConfigType.PASSWORD
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The listener security protocols served (TLS: broker/security/tls.py; SASL: broker/security/sasl/).
IMPLEMENTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in _SECURITY_PROTOCOLS)
_HOUR_MS = 60 * 60 * 1000
_WEEK_MS = 7 * 24 * _HOUR_MS
_DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # 1 MiB + LOG_OVERHEAD (offset + length), as Kafka
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# The one replica.selector.class offered (KIP-392; broker/replica/replica_selector.py), Kafka's name.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# The one authorizer offered (Kafka's KRaft authorizer; broker/security/authorizer.py).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _d(name: str, type_: ConfigType, default: Any, validator: Validator | None = None,
       importance: str = _M, doc: str = "", dynamic: bool = False, no_effect: str = "") -> ConfigDef:
    return ConfigDef(name, type_, default, validator, importance, doc, dynamic, no_effect)


def _at_least(n: float) -> Range:
    return Range(min=n)


class _MetadataStoreValidator:
    """``local`` or ``etcd://host:port[,host:port...]``."""

    def __call__(self, value: Any) -> None:
        if value is None or value == "local":
            return
        try:
            etcd_endpoints(str(value))
        except ValueError as e:
            raise ValueError(f"value must be {self.describe()} ({e})") from None

    def describe(self) -> str:
        return "local or etcd://host:port[,host:port...]"


class _ProcessesValidator:
    """``auto`` or a whole number of at least 1 (``odradek.processes``)."""

    def __call__(self, value: Any) -> None:
        if value is None or str(value).strip() == "auto":
            return
        if not str(value).strip().isdigit() or int(value) < 1:
            raise ValueError(f"value must be {self.describe()}")

    def describe(self) -> str:
        return "auto or a whole number of at least 1"


def etcd_endpoints(store: str) -> list[tuple[str, int]]:
    """The (host, port) endpoints of ``metadata.store=etcd://h:p[,h:p...]``; ValueError if malformed."""
    if not store.startswith(ETCD_SCHEME):
        raise ValueError("must be 'local' or etcd://host:port[,host:port...]")
    return parse_etcd_endpoints(store)


# Why keys are accepted but have no effect (ConfigDef.no_effect), for the start-up warning.
_KRAFT = "the controller is embedded: no KRaft quorum to configure"


DEFINITIONS: tuple[ConfigDef, ...] = (
    # --- identity and roles -----------------------------------------------------------------------
    _d("node.id", _I, -1, _at_least(-1), _H, "This server's id in the cluster; required (broker.id is a synonym)."),
    _d("broker.id", _I, -1, _at_least(-1), _H, "Legacy synonym of node.id; if both are set they must match."),
    _d("process.roles", _LI, [], ValidList(("broker", "controller")), _H,
       "KRaft roles of this process. Refused when set: every Odradek node runs a broker and a controller "
       "candidate, and metadata.store says where the cluster's metadata lives."),
    _d("cluster.id", _ST, None, _ClusterIdValidator(), _H,
       "Odradek extension: the cluster id written to meta.properties on first start (Kafka sets it with "
       "kafka-storage format). Unset = generate one."),
    _d("controller.quorum.voters", _LI, [], None, _H,
       "KRaft static voters (id@host:port). Refused when set: Odradek's controllers elect through "
       "metadata.store (etcd), not a KRaft quorum."),
    _d("controller.quorum.bootstrap.servers", _LI, [], None, _H, "KRaft bootstrap servers; accepted, unused.",
       no_effect=_KRAFT),
    _d("controller.listener.names", _LI, [], None, _H,
       "Listener names used by the KRaft controller; such listeners are not advertised to clients."),
    _d("broker.rack", _ST, None, None, _M, "Rack of this broker, returned in Metadata and DescribeCluster; "
       "the controller puts a partition's replicas on distinct racks (Kafka's StripedReplicaPlacer)."),
    _d("metadata.store", _ST, "local", _MetadataStoreValidator(), _H,
       "Odradek extension: where cluster metadata and the controller lease live. 'local' (default): this "
       "node alone, its controller embedded, lease and metadata log in metadata.log.dir. "
       "'etcd://host:port[,host:port...]': join the cluster kept in that etcd (v3 API); every node "
       "campaigns for the controller lease there."),
    _d("odradek.processes", _ST, "1", _ProcessesValidator(), _H,
       "Odradek extension: broker processes this command runs on the host, as one deployment "
       "(broker/launcher/host_supervisor.py): node ids node.id..node.id+N-1, listener ports shifted by 0..N-1, "
       "log dirs <log.dirs>/node-<id>, broker.rack the host name unless set, and with metadata.store=local "
       "a metadata store served by the supervisor. 'auto' = one per usable core. The --processes flag sets it."),
    _d("controller.lease.ttl.ms", _I, 10_000, _at_least(1_000), _H,
       "Odradek extension: TTL of the controller's lease and of each broker's registration in etcd. A "
       "node that stops renewing loses the controller role (or its registration) this long after its "
       "last renewal; etcd rounds it up to whole seconds."),
    _d("metadata.log.dir", _ST, None, None, _H,
       "Directory of the cluster metadata log; unset = the first log directory."),
    _d("metadata.log.max.record.bytes.between.snapshots", _LG, 20 * 1024 * 1024, _at_least(1), _H,
       "The active controller snapshots the metadata image once the records committed since the last "
       "snapshot reach this many bytes, and deletes the records the snapshot covers (local log or etcd)."),
    _d("metadata.log.max.snapshot.interval.ms", _LG, 3_600_000, _at_least(0), _H,
       "The active controller snapshots the metadata image when this long has passed since the last "
       "snapshot and records were committed since; 0 disables snapshots by time."),
    # --- sockets and listeners --------------------------------------------------------------------
    _d("listeners", _ST, "PLAINTEXT://:9092", None, _H,
       "Comma-separated NAME://host:port to bind; empty host binds every interface.", dynamic=True),
    _d("advertised.listeners", _ST, None, None, _H,
       "Listeners handed to clients in Metadata; defaults to listeners.", dynamic=True),
    _d("listener.security.protocol.map", _ST, _DEFAULT_PROTOCOL_MAP, None, _L,
       "Listener name -> security protocol pairs NAME:PROTOCOL.", dynamic=True),
    _d("inter.broker.listener.name", _ST, None, None, _M,
       "Listener other brokers use to reach this one (replica fetches, forwarding to the controller)."),
    _d("security.inter.broker.protocol", _ST, "PLAINTEXT", ValidString(_SECURITY_PROTOCOLS), _M,
       "Security protocol between brokers when inter.broker.listener.name is unset (its name is the "
       "listener used)."),
    _d("socket.send.buffer.bytes", _I, 100 * 1024, None, _H, "SO_SNDBUF of client sockets; -1 = OS default."),
    _d("socket.receive.buffer.bytes", _I, 100 * 1024, None, _H, "SO_RCVBUF of client sockets; -1 = OS default."),
    _d("socket.request.max.bytes", _I, 100 * 1024 * 1024, _at_least(1), _H,
       "Largest request frame accepted; a bigger size prefix closes the connection."),
    _d("socket.listen.backlog.size", _I, 50, _at_least(1), _M, "listen() backlog of each listener."),
    _d("num.network.threads", _I, 3, _at_least(1), _H, "Network threads (event loops serving sockets).",
       dynamic=True),
    _d("num.io.threads", _I, 8, _at_least(1), _H, "Threads doing request work and disk I/O.", dynamic=True),
    _d("background.threads", _I, 10, _at_least(1), _H, "Threads for background tasks.", dynamic=True,
       no_effect="no background thread pool: periodic work runs on the IO threads"),
    _d("queued.max.requests", _I, 500, _at_least(1), _H,
       "Requests queued for the I/O threads before the network stops reading."),
    _d("queued.max.request.bytes", _LG, -1, None, _M, "Bytes of queued requests before reading stops; -1 = no limit."),
    _d("connections.max.idle.ms", _LG, 10 * 60 * 1000, None, _M, "Idle connections are closed after this."),
    _d("max.connections", _I, INT_MAX, _at_least(0), _M, "Maximum open client connections.", dynamic=True),
    # --- SASL (broker/security/sasl/, docs/security-sasl.md) ---------------------------------------
    _d("sasl.enabled.mechanisms", _LI, ["GSSAPI"], None, _M,
       "SASL mechanisms enabled on SASL listeners (listener.name.<l>.sasl.enabled.mechanisms overrides per "
       "listener): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512. GSSAPI (Kafka's default) is not implemented: a SASL "
       "listener that would enable it stops start-up."),
    _d("sasl.mechanism.inter.broker.protocol", _ST, "GSSAPI", None, _M,
       "SASL mechanism brokers use between themselves when the inter-broker listener is SASL."),
    _d("sasl.server.max.receive.size", _I, 524288, _at_least(1), _L,
       "Largest request accepted on a SASL connection before it is authenticated."),
    _d("connections.max.reauth.ms", _LG, 0, _at_least(0), _M,
       "KIP-368: SASL sessions last at most this long; a client must re-authenticate before, or its "
       "connection is closed at its next request. 0 = sessions never expire."),
    _d("connection.failed.authentication.delay.ms", _I, 100, _at_least(0), _L,
       "Delay of the response (and close) after a failed authentication, slowing password guessing."),
    _d("max.connections.per.ip", _I, INT_MAX, _at_least(0), _M, "Maximum connections from one IP.",
       dynamic=True),
    _d("max.connections.per.ip.overrides", _ST, "", None, _M, "host:count overrides of max.connections.per.ip.",
       dynamic=True),
    _d("max.connection.creation.rate", _I, INT_MAX, _at_least(0), _M,
       "New connections accepted per second, broker-wide (KIP-612; listener.name.<l>.max.connection.creation.rate "
       "per listener): the acceptor waits beyond it.", dynamic=True),
    _d("quota.window.num", _I, 11, _at_least(1), _L, "Samples kept for client quota rates."),
    _d("quota.window.size.seconds", _I, 1, _at_least(1), _L, "Time span of each client quota sample."),
    _d("request.timeout.ms", _I, 30000, None, _H,
       "Timeout of the broker's own requests: the transaction coordinator's WriteTxnMarkers to the "
       "partition leaders, and how long their markers may wait to be replicated."),
    # --- TLS (broker/security/tls.py; each key may be overridden per listener: listener.name.<name>.ssl.*)
    _d("ssl.keystore.type", _ST, "JKS", None, _M,
       "Key store format: PEM or PKCS12 (JKS, Kafka's default, is refused: convert it to PKCS12)."),
    _d("ssl.keystore.location", _ST, None, None, _H, "Key store file (PEM: private key + certificate chain)."),
    _d("ssl.keystore.password", _PW, None, None, _H, "Password of the key store file (PKCS12)."),
    _d("ssl.key.password", _PW, None, None, _H, "Password of the private key (an encrypted PEM key)."),
    _d("ssl.keystore.certificate.chain", _PW, None, None, _H, "Inline PEM certificate chain (ssl.keystore.type=PEM)."),
    _d("ssl.keystore.key", _PW, None, None, _H, "Inline PEM private key (ssl.keystore.type=PEM)."),
    _d("ssl.truststore.type", _ST, "JKS", None, _M, "Trust store format: PEM or PKCS12."),
    _d("ssl.truststore.location", _ST, None, None, _H, "Trust store file (PEM: the trusted CA certificates)."),
    _d("ssl.truststore.password", _PW, None, None, _H, "Password of the trust store file (PKCS12)."),
    _d("ssl.truststore.certificates", _PW, None, None, _H, "Inline PEM trusted certificates."),
    _d("ssl.client.auth", _ST, "none", ValidString(("required", "requested", "none")), _M,
       "Whether TLS clients must (required), may (requested) or need not (none) present a certificate."),
    _d("ssl.enabled.protocols", _LI, ["TLSv1.2", "TLSv1.3"], None, _M, "TLS versions accepted."),
    _d("ssl.protocol", _ST, "TLSv1.3", None, _M, "TLS protocol of the SSL context (TLSv1.2 caps the version)."),
    _d("ssl.cipher.suites", _LI, [], None, _L, "Cipher suites (IANA or OpenSSL names); empty = OpenSSL's defaults."),
    _d("ssl.endpoint.identification.algorithm", _ST, "https", None, _L,
       "https: the inter-broker client checks the other broker's host name against its certificate; empty: no check."),
    _d("ssl.principal.mapping.rules", _ST, "DEFAULT", None, _L,
       "Rules mapping a client certificate's subject DN to the principal name (KIP-371)."),
    _d("ssl.keymanager.algorithm", _ST, "SunX509", None, _L, "Java key manager algorithm.",
       no_effect="a Java JSSE setting; OpenSSL has no key managers"),
    _d("ssl.trustmanager.algorithm", _ST, "PKIX", None, _L, "Java trust manager algorithm.",
       no_effect="a Java JSSE setting; OpenSSL verifies with its own PKIX implementation"),
    _d("ssl.secure.random.implementation", _ST, None, None, _L, "Java SecureRandom implementation.",
       no_effect="a Java JSSE setting; OpenSSL seeds itself"),
    _d("ssl.provider", _ST, None, None, _L, "Java security provider.", no_effect="a Java JSSE setting"),
    # --- message and fetch sizes ------------------------------------------------------------------
    _d("message.max.bytes", _I, _DEFAULT_MAX_MESSAGE_BYTES, _at_least(0), _H,
       "Largest record batch accepted (topic synonym max.message.bytes).", dynamic=True),
    _d("fetch.max.bytes", _I, 55 * 1024 * 1024, _at_least(1024), _M, "Upper bound on bytes in a Fetch response."),
    _d("max.incremental.fetch.session.cache.slots", _I, 1000, _at_least(0), _M,
       "Incremental fetch sessions kept (KIP-227)."),
    _d("telemetry.max.bytes", _I, 1024 * 1024, _at_least(1), _L,
       "Largest client metrics push (KIP-714) accepted, compressed and decompressed "
       "(broker/client_telemetry/manager.py)."),
    _d("max.request.partition.size.limit", _I, 2000, _at_least(1), _M,
       "Partitions in one DescribeTopicPartitions answer (broker/api/handlers/describe_topic_partitions.py)."),
    # Topic defaults (storage/log_config.py); appends recompress to a codec other than the batch's
    # (storage/recompression.py).
    _d("compression.type", _ST, "producer", ValidString(_COMPRESSION_TYPES), _H,
       "Final compression of topics; producer = keep what the producer sent.", dynamic=True),
    _d("compression.gzip.level", _I, -1, _GzipLevel(), _M, "gzip level when compression.type=gzip.", dynamic=True),
    _d("compression.lz4.level", _I, 9, Range(1, 17), _M, "lz4 level when compression.type=lz4.", dynamic=True),
    _d("compression.zstd.level", _I, 3, Range(-131072, 22), _M, "zstd level when compression.type=zstd.",
       dynamic=True),
    # --- topics -----------------------------------------------------------------------------------
    _d("num.partitions", _I, 1, _at_least(1), _M, "Partitions of an auto-created topic."),
    _d("max.broker.partitions", _I, INT_MAX, _at_least(1), _M,
       "The most partition replicas this broker hosts; CreateTopics / CreatePartitions / auto-creation "
       "past it fail with POLICY_VIOLATION. Named and defaulted as KIP-578 proposed (no limit unless "
       "set; Kafka never shipped one). Each partition costs about one open file per segment; a log "
       "that cannot be created for want of files fails its request with KAFKA_STORAGE_ERROR."),
    _d("default.replication.factor", _I, 1, None, _M, "Replication factor of an auto-created topic."),
    _d("min.insync.replicas", _I, 1, _at_least(1), _H, "Replicas that must ack an acks=-1 produce.",
       dynamic=True),
    _d("auto.create.topics.enable", _B, True, None, _H, "Create unknown topics on Metadata/Produce."),
    _d("controlled.shutdown.enable", _B, True, None, _M,
       "Cluster mode: on SIGTERM, move this broker's leaderships to other ISR members before it stops "
       "serving (its registration is withdrawn first, so the controller acts at once)."),
    _d("controlled.shutdown.timeout.ms", _I, 30_000, _at_least(0), _M,
       "Odradek extension: how long a controlled shutdown waits for the leaderships to move "
       "(Kafka's ZooKeeper-era retries x backoff)."),
    _d("auto.leader.rebalance.enable", _B, True, None, _H,
       "Cluster mode: the controller moves leadership back to the preferred replica when a broker "
       "leads too few of its preferred partitions (see leader.imbalance.*)."),
    _d("leader.imbalance.check.interval.seconds", _I, 300, _at_least(1), _H,
       "How often the controller checks the leader imbalance."),
    _d("leader.imbalance.per.broker.percentage", _I, 10, _at_least(0), _H,
       "Imbalance (percent of a broker's preferred partitions it does not lead) above which the "
       "controller runs preferred elections for that broker."),
    _d("delete.topic.enable", _B, True, None, _H, "Allow DeleteTopics."),
    _d("unclean.leader.election.enable", _B, False, None, _H, "Allow out-of-sync replicas to become leader.",
       dynamic=True),
    # --- log basics -------------------------------------------------------------------------------
    _d("log.dir", _ST, "/tmp/kafka-logs", None, _H, "Log directory when log.dirs is unset."),
    _d("log.dirs", _ST, None, None, _H, "Comma-separated log directories; wins over log.dir."),
    _d("num.recovery.threads.per.data.dir", _I, 1, _at_least(1), _H, "Threads recovering each log dir at start-up.",
       dynamic=True,
       no_effect="each log directory is loaded by one thread"),
    _d("log.segment.bytes", _I, 1024 * 1024 * 1024, _at_least(14), _H, "Roll a segment at this size.",
       dynamic=True),
    _d("log.roll.ms", _LG, None, None, _H, "Roll a segment after this age (ms); wins over log.roll.hours.",
       dynamic=True),
    _d("log.roll.hours", _I, 7 * 24, _at_least(1), _H, "Roll a segment after this age (hours)."),
    _d("log.roll.jitter.ms", _LG, None, None, _H, "Random jitter subtracted from the roll time (ms).",
       dynamic=True),
    _d("log.roll.jitter.hours", _I, 0, _at_least(0), _H, "Roll jitter in hours."),
    _d("log.retention.ms", _LG, None, None, _H, "Delete segments older than this (ms); -1 = forever.",
       dynamic=True),
    _d("log.retention.minutes", _I, None, None, _H, "Retention in minutes, if log.retention.ms is unset."),
    _d("log.retention.hours", _I, 7 * 24, None, _H, "Retention in hours, if ms and minutes are unset."),
    _d("log.retention.bytes", _LG, -1, None, _H, "Delete old segments beyond this partition size; -1 = none.",
       dynamic=True),
    _d("log.retention.check.interval.ms", _LG, 5 * 60 * 1000, _at_least(1), _M,
       "How often retention is checked."),
    _d("log.cleanup.policy", _LI, ["delete"], ValidList(("compact", "delete")), _M,
       "delete and/or compact.", dynamic=True),
    _d("log.index.size.max.bytes", _I, 10 * 1024 * 1024, _at_least(4), _M, "Maximum size of an offset/time index.",
       dynamic=True),
    _d("log.index.interval.bytes", _I, 4096, _at_least(0), _M, "Bytes between offset index entries.",
       dynamic=True),
    _d("log.flush.interval.messages", _LG, LONG_MAX, _at_least(1), _H, "fsync after this many messages.",
       dynamic=True),
    _d("log.flush.interval.ms", _LG, None, None, _H, "fsync after this many ms; unset = the scheduler interval.",
       dynamic=True),
    _d("log.flush.scheduler.interval.ms", _LG, LONG_MAX, None, _H, "How often the flusher checks logs."),
    _d("log.flush.offset.checkpoint.interval.ms", _I, 60000, _at_least(0), _H,
       "How often recovery-point checkpoints are written."),
    _d("log.flush.start.offset.checkpoint.interval.ms", _I, 60000, _at_least(0), _H,
       "How often log-start-offset checkpoints are written.",
       no_effect="the log start offsets are checkpointed with the recovery points, every log.flush.offset.checkpoint.interval.ms"),
    _d("log.segment.delete.delay.ms", _LG, 60000, _at_least(0), _H,
       "Delay before a deleted segment's files are removed (topic synonym file.delete.delay.ms).",
       dynamic=True),
    _d("log.preallocate", _B, False, None, _M, "Preallocate segment files.", dynamic=True,
       no_effect="segment files are not preallocated"),
    _d("log.message.timestamp.type", _ST, "CreateTime", ValidString(("CreateTime", "LogAppendTime")), _M,
       "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's.", dynamic=True),
    _d("log.message.timestamp.before.max.ms", _LG, LONG_MAX, _at_least(0), _M,
       "How far in the past a CreateTime timestamp may be.", dynamic=True),
    _d("log.message.timestamp.after.max.ms", _LG, LONG_MAX, _at_least(0), _M,
       "How far in the future a CreateTime timestamp may be.", dynamic=True),
    _d("log.local.retention.ms", _LG, -2, _at_least(-2), _M,
       "Tiered storage local retention; accepted, unused (no tiered storage).", dynamic=True,
       no_effect="no tiered storage"),
    _d("log.local.retention.bytes", _LG, -2, _at_least(-2), _M,
       "Tiered storage local retention; accepted, unused (no tiered storage).", dynamic=True,
       no_effect="no tiered storage"),
    _d("log.message.downconversion.enable", _B, True, None, _L, "Accepted for compatibility.", dynamic=True,
       no_effect="no down-conversion: Kafka 4 removed it too"),
    # --- log cleaner (compaction) -----------------------------------------------------------------
    _d("log.cleaner.enable", _B, True, None, _M, "Run the log cleaner (needed for compacted topics)."),
    _d("log.cleaner.threads", _I, 1, _at_least(0), _M, "Cleaner threads.", dynamic=True),
    _d("log.cleaner.io.max.bytes.per.second", _D, 1.7976931348623157e308, None, _M,
       "Cleaner I/O throttle.", dynamic=True,
       no_effect="the log cleaner is not throttled"),
    _d("log.cleaner.dedupe.buffer.size", _LG, 128 * 1024 * 1024, None, _M, "Memory for cleaner key maps.",
       dynamic=True),
    _d("log.cleaner.io.buffer.size", _I, 512 * 1024, _at_least(0), _M, "Cleaner I/O buffers.", dynamic=True),
    _d("log.cleaner.io.buffer.load.factor", _D, 0.9, None, _M, "Cleaner key map load factor.", dynamic=True),
    _d("log.cleaner.backoff.ms", _LG, 15000, _at_least(0), _M, "Sleep when nothing is cleanable.",
       dynamic=True),
    _d("log.cleaner.min.cleanable.ratio", _D, 0.5, Range(0, 1), _M,
       "Dirty ratio at which a log becomes cleanable.", dynamic=True),
    _d("log.cleaner.delete.retention.ms", _LG, 24 * _HOUR_MS, _at_least(0), _M,
       "How long tombstones are kept.", dynamic=True),
    _d("log.cleaner.min.compaction.lag.ms", _LG, 0, _at_least(0), _M,
       "Minimum age before a message may be compacted.", dynamic=True),
    _d("log.cleaner.max.compaction.lag.ms", _LG, LONG_MAX, _at_least(1), _M,
       "Maximum age before a message must be compactable.", dynamic=True),
    # --- replication ------------------------------------------------------------------------------
    _d("replica.lag.time.max.ms", _LG, 30000, None, _H, "A follower this far behind leaves the ISR."),
    _d("replica.fetch.max.bytes", _I, 1024 * 1024, _at_least(0), _M, "Bytes per partition in a replica fetch."),
    _d("replica.fetch.min.bytes", _I, 1, None, _H, "Minimum bytes for a replica fetch response."),
    _d("replica.fetch.wait.max.ms", _I, 500, None, _H, "Maximum wait of a replica fetch."),
    _d("replica.fetch.backoff.ms", _I, 1000, _at_least(0), _M, "Sleep after a replica fetch error."),
    _d("replica.fetch.response.max.bytes", _I, 10 * 1024 * 1024, _at_least(0), _M,
       "Bytes in a whole replica fetch response."),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", _LG, LONG_MAX, _at_least(0), _M,
       "Bytes per second that all moves of replicas between this broker's log dirs (AlterReplicaLogDirs) copy "
       "together; kafka-reassign-partitions --replica-alter-log-dirs-throttle sets it.", dynamic=True),
    # --- authorization (broker/security/authorizer.py, docs/security-acls.md) ----------------------
    _d("authorizer.class.name", _ST, "", ValidString(("", STANDARD_AUTHORIZER)), _L,
       "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer checks every request "
       "against the ACLs stored by the controller; empty = no authorizer, every request allowed."),
    _d("super.users", _ST, "", None, _L,
       "Principals (User:name) separated by semicolons that the authorizer allows everything."),
    _d("allow.everyone.if.no.acl.found", _B, False, None, _L,
       "Whether the authorizer allows an operation on a resource that no ACL applies to."),
    _d("replica.selector.class", _ST, None, ValidString((RACK_AWARE_REPLICA_SELECTOR,)), _M,
       "KIP-392: how a partition leader picks the replica a consumer (Fetch v11+, client.rack) reads "
       "from. Unset: the leader. org.apache.kafka.common.replica.RackAwareReplicaSelector: a replica "
       "in the consumer's rack (broker.rack), the leader first."),
    _d("replica.socket.timeout.ms", _I, 30000, None, _H, "Socket timeout of replica fetches."),
    _d("replica.socket.receive.buffer.bytes", _I, 64 * 1024, None, _H,
       "SO_RCVBUF of the replica fetchers' connections to the leaders, set before they connect; -1 = OS default."),
    _d("replica.high.watermark.checkpoint.interval.ms", _LG, 5000, None, _H,
       "How often the high watermarks are written to replication-offset-checkpoint."),
    _d("num.replica.fetchers", _I, 1, None, _H,
       "Replica fetchers per source broker (read at start-up: a dynamic change applies at the next start).",
       dynamic=True),
    # --- group coordinator ------------------------------------------------------------------------
    _d("group.min.session.timeout.ms", _I, 6000, None, _M, "Smallest session timeout a classic member may ask."),
    _d("group.max.session.timeout.ms", _I, 1800000, None, _M, "Largest session timeout a classic member may ask."),
    _d("group.initial.rebalance.delay.ms", _I, 3000, None, _M,
       "Wait for more members before the first rebalance of an empty group."),
    _d("group.max.size", _I, INT_MAX, _at_least(1), _M, "Maximum members of a classic group."),
    _d("group.coordinator.rebalance.protocols", _LI, ["classic", "consumer"],
       ValidList(("classic", "consumer", "share", "streams")), _M,
       "Enabled rebalance protocols (consumer = KIP-848).",
       no_effect="the classic and consumer (KIP-848) protocols are always enabled"),
    _d("group.coordinator.threads", _I, 1, _at_least(1), _M, "Group coordinator threads.",
       no_effect="the group coordinator runs on the request handler loop"),
    _d("group.coordinator.append.linger.ms", _I, 10, _at_least(0), _M, "Batching delay of coordinator writes.",
       no_effect="group coordinator writes are not batched"),
    _d("group.consumer.session.timeout.ms", _I, 45000, _at_least(1), _M, "KIP-848 member session timeout."),
    _d("group.consumer.min.session.timeout.ms", _I, 45000, _at_least(1), _M,
       "KIP-848 minimum session timeout: group.consumer.session.timeout.ms below it stops start-up "
       "(it also bounds per-group configs in Kafka, which Odradek does not implement)."),
    _d("group.consumer.max.session.timeout.ms", _I, 60000, _at_least(1), _M,
       "KIP-848 maximum session timeout: group.consumer.session.timeout.ms above it stops start-up."),
    _d("group.consumer.heartbeat.interval.ms", _I, 5000, _at_least(1), _M, "KIP-848 heartbeat interval."),
    _d("group.consumer.min.heartbeat.interval.ms", _I, 5000, _at_least(1), _M,
       "KIP-848 minimum heartbeat interval: group.consumer.heartbeat.interval.ms below it stops start-up."),
    _d("group.consumer.max.heartbeat.interval.ms", _I, 15000, _at_least(1), _M,
       "KIP-848 maximum heartbeat interval: group.consumer.heartbeat.interval.ms above it stops start-up."),
    _d("group.consumer.max.size", _I, INT_MAX, _at_least(1), _M, "Maximum members of a KIP-848 group."),
    _d("group.consumer.assignors", _LI, ["uniform", "range"], None, _M,
       "Server-side assignors for KIP-848 groups, first = default. Kafka's default names the classes "
       "UniformAssignor and RangeAssignor; Odradek accepts their short names."),
    # Streams groups (KIP-1071, Kafka 4.4's GroupCoordinatorConfig; broker/group/streams_group.py).
    _d("group.streams.session.timeout.ms", _I, 45000, _at_least(1), _M, "Streams group member session timeout."),
    _d("group.streams.min.session.timeout.ms", _I, 45000, _at_least(1), _M,
       "Minimum streams group session timeout: group.streams.session.timeout.ms below it stops start-up."),
    _d("group.streams.max.session.timeout.ms", _I, 60000, _at_least(1), _M,
       "Maximum streams group session timeout: group.streams.session.timeout.ms above it stops start-up."),
    _d("group.streams.heartbeat.interval.ms", _I, 5000, _at_least(1), _M, "Streams group heartbeat interval."),
    _d("group.streams.min.heartbeat.interval.ms", _I, 5000, _at_least(1), _M,
       "Minimum streams group heartbeat interval: group.streams.heartbeat.interval.ms below it stops start-up."),
    _d("group.streams.max.heartbeat.interval.ms", _I, 15000, _at_least(1), _M,
       "Maximum streams group heartbeat interval: group.streams.heartbeat.interval.ms above it stops start-up."),
    _d("group.streams.max.size", _I, INT_MAX, _at_least(1), _M, "Maximum members (stream threads) of a streams group."),
    _d("group.streams.num.standby.replicas", _I, 0, _at_least(0), _M, "Standby replicas of each stateful task."),
    _d("group.streams.max.standby.replicas", _I, 2, _at_least(0), _M,
       "Bound of group.streams.num.standby.replicas (and, in Kafka, of its per-group config)."),
    _d("group.streams.initial.rebalance.delay.ms", _I, 3000, _at_least(0), _M,
       "How long a new streams group waits for more members before its first assignment."),
    _d("group.streams.assignors", _LI, ["sticky"], ValidList(("sticky",)), _M,
       "Server-side task assignors of streams groups; Kafka's one built-in assignor, sticky."),
    _d("group.streams.assignment.interval.ms", _I, 1000, _at_least(0), _M,
       "Least time between two target assignments of a streams group: a change within it waits "
       "(ASSIGNMENT_DELAYED) until a heartbeat after it; 0 = assign at every change. Read at start-up."),
    _d("group.streams.min.assignment.interval.ms", _I, 0, _at_least(0), _M,
       "Minimum of group.streams.assignment.interval.ms."),
    _d("group.streams.max.assignment.interval.ms", _I, 15000, _at_least(0), _M,
       "Maximum of group.streams.assignment.interval.ms."),
    _d("group.streams.num.warmup.replicas", _I, 2, _at_least(0), _M,
       "The most warm-up tasks a streams group runs at a time. Kafka 4.4.0 assigns none whatever the "
       "value (its AssignmentRefiner returns the assignor's target unchanged), nor does Odradek."),
    _d("group.streams.max.warmup.replicas", _I, 20, _at_least(0), _M,
       "Bound of group.streams.num.warmup.replicas (and, in Kafka, of its per-group config)."),
    _d("group.streams.rack.aware.assignment.tags", _LI, [], None, _L,
       "Client tag keys for rack-aware standby placement (checked for duplicates as Kafka does). Kafka "
       "4.4.0's sticky assignor, like Odradek's, does not read them; a v1 heartbeat of a member "
       "lacking one of them gets the MISSING_CLIENT_TAGS status."),
    _d("group.streams.topology.description.plugin.class", _ST, None, None, _M,
       "Kafka's StreamsGroupTopologyDescriptionPlugin class (KIP-1331). Unset, as Kafka's default: "
       "StreamsGroupTopologyDescriptionUpdate answers UNSUPPORTED_VERSION and no heartbeat asks for "
       "a description. Odradek runs no Java plugin, so a value stops start-up."),
    _d("group.streams.task.offset.interval.ms", _I, 60000, _at_least(1), _M,
       "How often members report their tasks' changelog offsets (answered in each heartbeat)."),
    _d("group.streams.min.task.offset.interval.ms", _I, 15000, _at_least(1), _M,
       "Minimum of group.streams.task.offset.interval.ms."),
    _d("group.streams.acceptable.recovery.lag", _LG, 10000, _at_least(0), _M,
       "The lag (offsets) below which a member counts as caught up on a task (answered in each heartbeat)."),
    # Share groups (KIP-932, Kafka 4.4's ShareGroupConfig and GroupCoordinatorConfig).
    _d("group.share.session.timeout.ms", _I, 45000, _at_least(1), _M, "Share group member session timeout."),
    _d("group.share.min.session.timeout.ms", _I, 45000, _at_least(1), _M,
       "Minimum share group session timeout: group.share.session.timeout.ms below it stops start-up."),
    _d("group.share.max.session.timeout.ms", _I, 60000, _at_least(1), _M,
       "Maximum share group session timeout: group.share.session.timeout.ms above it stops start-up."),
    _d("group.share.heartbeat.interval.ms", _I, 5000, _at_least(1), _M, "Share group heartbeat interval."),
    _d("group.share.min.heartbeat.interval.ms", _I, 5000, _at_least(1), _M,
       "Minimum share group heartbeat interval: group.share.heartbeat.interval.ms below it stops start-up."),
    _d("group.share.max.heartbeat.interval.ms", _I, 15000, _at_least(1), _M,
       "Maximum share group heartbeat interval: group.share.heartbeat.interval.ms above it stops start-up."),
    _d("group.share.max.size", _I, 200, Range(1, 1000), _M, "Maximum members of a share group."),
    _d("group.share.record.lock.duration.ms", _I, 30000, Range(1000, 3_600_000), _M,
       "How long a share consumer holds the records a ShareFetch acquired before they are available again."),
    _d("group.share.min.record.lock.duration.ms", _I, 15000, Range(1000, 3_600_000), _M,
       "Lower bound of group.share.record.lock.duration.ms."),
    _d("group.share.max.record.lock.duration.ms", _I, 60000, Range(1000, 3_600_000), _M,
       "Upper bound of group.share.record.lock.duration.ms."),
    _d("group.share.delivery.count.limit", _I, 5, Range(2, 10), _M,
       "Deliveries of a record to a share group before it is archived."),
    _d("group.share.min.delivery.count.limit", _I, 2, Range(2, 10), _M,
       "Lower bound of group.share.delivery.count.limit."),
    _d("group.share.max.delivery.count.limit", _I, 10, Range(2, 10), _M,
       "Upper bound of group.share.delivery.count.limit."),
    _d("share.coordinator.state.topic.num.partitions", _I, 50, _at_least(1), _H,
       "Partitions of __share_group_state."),
    _d("share.coordinator.state.topic.replication.factor", _S, 3, _at_least(1), _H,
       "Replication factor of __share_group_state."),
    _d("share.coordinator.state.topic.min.isr", _S, 2, _at_least(1), _H,
       "min.insync.replicas of __share_group_state."),
    _d("share.coordinator.state.topic.segment.bytes", _I, 104857600, _at_least(1), _H,
       "Segment size of __share_group_state."),
    _d("share.coordinator.snapshot.update.records.per.snapshot", _I, 500, Range(0, 500), _M,
       "ShareUpdate records the share coordinator writes per share-partition between ShareSnapshots."),
    _d("share.coordinator.state.topic.prune.interval.ms", _I, 300000, _at_least(1), _L,
       "How often the share coordinator deletes the __share_group_state records no share-partition needs."),
    _d("share.coordinator.cold.partition.snapshot.interval.ms", _I, 300000, _at_least(1), _L,
       "How often the share coordinator snapshots again share-partitions not written for that long."),
    _d("group.share.partition.max.record.locks", _I, 2000, Range(100, 10000), _M,
       "Records in flight (acquired or waiting for redelivery) per share-partition."),
    _d("group.share.min.partition.max.record.locks", _I, 100, Range(100, 10000), _M,
       "Lower bound of group.share.partition.max.record.locks."),
    _d("group.share.max.partition.max.record.locks", _I, 4000, Range(100, 10000), _M,
       "Upper bound of group.share.partition.max.record.locks."),
    _d("group.share.max.share.sessions", _I, 2000, _at_least(1), _M, "Share sessions a broker keeps."),
    _d("offset.metadata.max.bytes", _I, 4096, None, _H, "Largest metadata string of a committed offset."),
    _d("offsets.load.buffer.size", _I, 5 * 1024 * 1024, _at_least(1), _H, "Read size when loading offsets."),
    _d("offsets.topic.num.partitions", _I, 50, _at_least(1), _H, "Partitions of __consumer_offsets."),
    _d("offsets.topic.replication.factor", _S, 3, _at_least(1), _H, "Replication factor of __consumer_offsets."),
    _d("offsets.topic.segment.bytes", _I, 100 * 1024 * 1024, _at_least(1), _H, "Segment size of __consumer_offsets."),
    _d("offsets.topic.compression.codec", _I, 0, None, _H, "Compression codec id of __consumer_offsets."),
    _d("offsets.retention.minutes", _I, 7 * 24 * 60, _at_least(1), _H,
       "Committed offsets of an empty group expire after this."),
    _d("offsets.retention.check.interval.ms", _LG, 600000, _at_least(1), _H, "How often offsets are expired."),
    _d("offsets.commit.timeout.ms", _I, 5000, _at_least(1), _H,
       "How long a group coordinator write (an offset commit, a group's state) waits to be replicated."),
    # --- transactions and producer ids ------------------------------------------------------------
    _d("transaction.state.log.num.partitions", _I, 50, _at_least(1), _H, "Partitions of __transaction_state."),
    _d("transaction.state.log.replication.factor", _S, 3, _at_least(1), _H,
       "Replication factor of __transaction_state."),
    _d("transaction.state.log.min.isr", _I, 2, _at_least(1), _H, "min.insync.replicas of __transaction_state."),
    _d("transaction.state.log.segment.bytes", _I, 100 * 1024 * 1024, _at_least(1), _H,
       "Segment size of __transaction_state."),
    _d("transaction.state.log.load.buffer.size", _I, 5 * 1024 * 1024, _at_least(1), _H,
       "Read size when loading transaction state."),
    _d("transaction.max.timeout.ms", _I, 15 * 60 * 1000, _at_least(1), _H,
       "Largest transaction timeout a producer may ask."),
    _d("transactional.id.expiration.ms", _I, 7 * 24 * _HOUR_MS, _at_least(1), _H,
       "Idle transactional ids expire after this."),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000, _at_least(1), _L,
       "How often timed-out transactions are aborted."),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", _I, _HOUR_MS, _at_least(1), _L,
       "How often expired transactional ids are removed."),
    _d("transaction.partition.verification.enable", _B, True, None, _L,
       "Verify partitions are in the transaction before appending (KIP-890).", dynamic=True),
    _d("add.partitions.to.txn.retry.backoff.ms", _I, 20, _at_least(1), _H,
       "How long a leader waits before asking the coordinator again to add a transactions-v2 batch's "
       "partition (Produce v12) that got CONCURRENT_TRANSACTIONS (the previous transaction completing)."),
    _d("add.partitions.to.txn.retry.backoff.max.ms", _I, 100, _at_least(0), _H,
       "How long a leader keeps asking to add a transactions-v2 batch's partition before answering "
       "CONCURRENT_TRANSACTIONS (at most request.timeout.ms)."),
    _d("producer.id.expiration.ms", _I, 24 * _HOUR_MS, _at_least(1), _L,
       "Idle producer ids' state expires after this.", dynamic=True),
    _d("producer.id.expiration.check.interval.ms", _I, 600000, _at_least(1), _L,
       "How often producer id expiry runs."),
    # --- Odradek's own ----------------------------------------------------------------------------
    _d("odradek.metrics.port", _I, -1, Range(-1, 65535), _M,
       "Port of the Prometheus /metrics endpoint; -1 = off, 0 = any free port."),
    _d("odradek.metrics.host", _ST, "", None, _L, "Interface of the metrics endpoint; empty = all."),
    _d("odradek.event.loop", _ST, "uvloop", ValidString(("uvloop", "asyncio")), _M,
       "Event loop implementation."),
    _d("odradek.fetch.sendfile", _B, True, None, _L,
       "Send Fetch record bytes with os.sendfile straight from the segment file (zero-copy); "
       "false copies them through Python (for measuring the difference)."),
    _d("odradek.testing.faults.enable", _B, False, None, _L,
       "Tests only: put fault injection (errors, delays, dropped connections, pauses) and the request "
       "journal in the request path (docs/testing.md). Off: the request path is as without them."),
    _d("odradek.testing.faults.port", _I, -1, Range(-1, 65535), _L,
       "Port of the fault injection HTTP endpoint (with odradek.testing.faults.enable); -1 = off, "
       "0 = any free port."),
    _d("odradek.testing.faults.host", _ST, "127.0.0.1", None, _L,
       "Interface of the fault injection endpoint; loopback unless set (anyone reaching it can break answers)."),
    _d("odradek.testing.journal.max.entries", _I, 10000, _at_least(1), _L,
       "Requests the journal keeps (the newest) while fault injection is on."),
    _d("odradek.port.mapped.listeners", _LI, [], None, _L,
       "Listeners whose advertised port differs from the port they bind on purpose, because a port mapping "
       "(docker -p, compose ports:, NAT) forwards one to the other: the start-up warning about the "
       "difference is logged at INFO for them (docker/compose.yaml names EXTERNAL)."),
)

CONFIG_DEFS: Mapping[str, ConfigDef] = {d.name: d for d in DEFINITIONS}


# ---------------------------------------------------------------------------------------------------
# Connection quotas

_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern


def parse_ip_overrides(raw: str, key: str = "max.connections.per.ip.overrides") -> dict[str, int]:
    """``host:count,host:count`` (Kafka's Csv.parseCsvMap: entries split on commas, each at its *last*
    colon, so an IPv6 address keeps its own colons). Hosts are names or IP addresses; the connection
    quotas resolve them. Raises ConfigError on a malformed entry, a bad count or an invalid host."""
    out: dict[str, int] = {}
    if not raw or not raw.strip():
        return out
    for entry in re.split(r"\s*,\s*", raw.strip()):
        host, sep, count = entry.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host:
            raise ConfigError(f"Error parsing configuration property '{key}': entry {entry!r} is not host:count")
        try:
            n = int(count)
        except ValueError:
            raise ConfigError(f"Error parsing configuration property '{key}': count {count!r} of {host} is not "
                              "an integer") from None
        if n < 0:
            raise ConfigError(f"Error parsing configuration property '{key}': count {n} of {host} is negative")
        out[host] = n
    invalid = [h for h in out if not _VALID_HOST.fullmatch(h)]
    if invalid:
        raise ConfigError(f"{key} contains invalid addresses : {','.join(invalid)}")
    return out


# ---------------------------------------------------------------------------------------------------
# Listeners


@dataclass(frozen=True)
class Listener:
    """One endpoint of ``listeners``/``advertised.listeners``.

    ``host`` is ``""`` for "every interface" (Kafka stores null) — pass :attr:`bind_host` to
    ``loop.create_server``.
    """

    name: str
    security_protocol: str
    host: str
    port: int

    @property
    def bind_host(self) -> str | None:
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# Kafka's URI_PARSE_REGEXP: NAME://host:port with an optional [] around IPv6 hosts.
_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def parse_protocol_map(raw: str, key: str = "listener.security.protocol.map") -> dict[str, str]:
    """Parse ``NAME:PROTOCOL,...`` into upper-cased listener name -> protocol."""
    out: dict[str, str] = {}
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip()
        if not sep or not name or not proto:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: entry {item!r} is not NAME:PROTOCOL")
        if proto.upper() not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {key}: unknown security protocol {proto!r}; "
                f"expected one of: {', '.join(_SECURITY_PROTOCOLS)}"
            )
        if name in out:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: listener {name} appears twice")
        out[name] = proto.upper()
    return out


def parse_listeners(raw: str, protocol_map: Mapping[str, str], key: str = "listeners",
                    require_distinct_ports: bool = True) -> list[Listener]:
    """Parse a listener list the way Kafka does; raise ConfigError naming ``key`` on any fault."""
    result: list[Listener] = []
    expected = "NAME://host:port entries, e.g. PLAINTEXT://localhost:9092 or PLAINTEXT://:9092"
    for entry in (s for s in re.split(r"\s*,\s*", raw.strip()) if s):
        m = _LISTENER_RE.match(entry)
        if not m:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: cannot parse {entry!r}; "
                              f"expected {expected}")
        name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: port {port} of {entry!r} "
                              "is not in [0, 65535]")
        proto = protocol_map.get(name)
        if proto is None:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {key}: no security protocol defined for listener "
                f"{name}; add it to listener.security.protocol.map (known: {', '.join(protocol_map)})"
            )
        if proto not in IMPLEMENTED_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {key}: listener {name} uses security protocol "
                f"{proto}; Odradek supports {', '.join(IMPLEMENTED_PROTOCOLS)}"
            )
        result.append(Listener(name, proto, host, port))
    names = [listener.name for listener in result]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: each listener must have a different name")
    if require_distinct_ports:
        _check_distinct_ports(result, raw, key)
    return result


def _check_distinct_ports(listeners: list[Listener], raw: str, key: str) -> None:
    # Kafka allows port 0 (ephemeral, for tests) to repeat, and one IPv4 + one IPv6 listener to
    # share a port; anything else sharing a port is an error.
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, group in by_port.items():
        if len(group) == 1:
            continue
        versions: list[int | None] = []
        for listener in group:
            try:
                versions.append(ipaddress.ip_address(listener.host).version)
            except ValueError:
                versions.append(None)
        if len(group) == 2 and sorted(v or 0 for v in versions) == [4, 6]:
            continue
        raise ConfigError(
            f"Invalid value {raw!r} for configuration {key}: each listener must have a different port "
            f"(port {port} is used twice; only one IPv4 and one IPv6 address may share a port)"
        )


# ---------------------------------------------------------------------------------------------------
# Security settings: refused until security is implemented

# Keys that ask for authentication, encryption or authorization. Odradek implements none of them
# yet; ignoring them (as an unknown key is ignored) would hand whoever asked for a secured broker
# an open one, so any of them set to a non-empty value stops start-up.
SECURITY_KEYS: frozenset[str] = frozenset({
    "principal.builder.class",
})
SECURITY_PREFIXES: tuple[str, ...] = ("sasl.",)
# Per-listener security settings (Kafka's listener.name.<name>.sasl.* / .<mechanism>.sasl.*); the
# ssl.* ones are implemented (broker/security/tls.py).
_LISTENER_SECURITY_RE = re.compile(r"^listener\.name\.[^.]+\.(?:[^.]+\.)?sasl\.")
# listener.name.<name>.ssl.<key>: a per-listener TLS setting (known when <key> is a defined ssl.* key).
LISTENER_SSL_RE = re.compile(r"^listener\.name\.[^.]+\.(ssl\..+)$")


def security_settings(originals: Mapping[str, str]) -> list[str]:
    """The settings in ``originals`` that ask for security, each as "key" or "key (why)".

    Listeners count when one of them (in listeners or advertised.listeners) maps to a protocol other
    than PLAINTEXT; a protocol map that merely names SSL/SASL protocols (Kafka's default map does)
    does not. Malformed listener values are left to the normal validation to report.
    """
    found = [key for key, value in originals.items()
             if value.strip() and (key in SECURITY_KEYS or key.startswith(SECURITY_PREFIXES)
                                   or _LISTENER_SECURITY_RE.match(key)) and not is_implemented_sasl_key(key)]
    ibp = originals.get("security.inter.broker.protocol", "").strip().upper()
    if ibp in _SECURITY_PROTOCOLS and ibp not in IMPLEMENTED_PROTOCOLS:  # an unknown value is the validator's to report
        found.append(f"security.inter.broker.protocol ({ibp})")
    try:
        pmap = parse_protocol_map(originals.get("listener.security.protocol.map", _DEFAULT_PROTOCOL_MAP))
    except ConfigError:
        return found
    for key in ("listeners", "advertised.listeners"):
        raw = originals.get(key)
        if raw is None:
            continue
        for entry in (e for e in re.split(r"\s*,\s*", raw.strip()) if e):
            m = _LISTENER_RE.match(entry)
            if m is None:
                continue
            name = m.group(1).upper()
            proto = pmap.get(name, "PLAINTEXT")
            if proto not in IMPLEMENTED_PROTOCOLS:
                found.append(f"{key} (listener {name} uses security protocol {proto}; Odradek supports "
                             f"{', '.join(IMPLEMENTED_PROTOCOLS)})")
    return found


def check_no_security(originals: Mapping[str, str]) -> None:
    """Raise ConfigError naming every security setting in ``originals``: never start open instead."""
    found = security_settings(originals)
    if found:
        raise ConfigError(
            "These security settings are not implemented yet in Odradek (GSSAPI/Kerberos SASL, a custom "
            "principal builder); refusing to start rather than run less secured than asked: "
            f"{', '.join(found)}. Remove them to start."
        )


# ---------------------------------------------------------------------------------------------------
# Environment and command line

# Kafka's KafkaDockerWrapper.ExcludeServerPropsEnv plus the other KAFKA_* variables the launch scripts
# (kafka-run-class.sh, docker/jvm/launch) read for themselves.
EXCLUDED_ENV: frozenset[str] = frozenset({
    "KAFKA_VERSION",
    "KAFKA_HEAP_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_JMX_HOSTNAME",
    "KAFKA_JMX_PORT",
    "KAFKA_DEBUG",
    "KAFKA_HOME",
    "KAFKA_LOG_DIR",  # kafka-run-class.sh: where log4j writes, not the data dir (that is log.dir)
    "KAFKA_CLASSPATH",
})


def env_to_config_key(name: str) -> str | None:
    """``KAFKA_LOG_DIRS`` -> ``log.dirs``; None for variables that are not broker configs.

    Note ``KAFKA_LOG_DIR`` is excluded (kafka-run-class.sh uses it for log4j output), so the
    ``log.dir`` key cannot come from the environment — use ``KAFKA_LOG_DIRS``.
    """
    if not name.startswith("KAFKA_") or name in EXCLUDED_ENV:
        return None
    key = name[len("KAFKA_"):].lower().replace("_", ".").replace("...", "-").replace("..", "_")
    return key or None


def config_from_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The broker keys set by ``environ`` (see module doc), in sorted variable order."""
    out: dict[str, str] = {}
    cluster_id = environ.get("CLUSTER_ID")
    if cluster_id:
        out["cluster.id"] = cluster_id
    for name in sorted(environ):
        key = env_to_config_key(name)
        if key is not None:
            out[key] = environ[name]
    return out


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}``; a missing ``=`` or empty key is an error."""
    out: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"Invalid --override {item!r}: expected key=value")
        out[key] = value
    return out


# ---------------------------------------------------------------------------------------------------
# The loaded configuration

_ORIGIN_SOURCE = {
    "default": ConfigSource.DEFAULT_CONFIG,
    "file": ConfigSource.STATIC_BROKER_CONFIG,
    "env": ConfigSource.STATIC_BROKER_CONFIG,
    "override": ConfigSource.STATIC_BROKER_CONFIG,
    "dynamic": ConfigSource.DYNAMIC_BROKER_CONFIG,
}


@dataclass(frozen=True)
class _Layer:
    origin: str  # "file" | "env" | "override" | "dynamic"
    values: Mapping[str, str]


class BrokerConfig(Mapping[str, Any]):
    """A validated, immutable broker configuration. ``cfg["num.partitions"]`` -> typed value.

    Iterating yields every defined key; an undefined key raises KeyError (unknown keys given by the
    user are only in :attr:`originals`).
    """

    def __init__(self, layers: Sequence[_Layer], definitions: Mapping[str, ConfigDef] = CONFIG_DEFS,
                 *, hostname: Callable[[], str] = socket.getfqdn) -> None:
        self.definitions: Mapping[str, ConfigDef] = definitions
        self._layers = tuple(layers)
        originals: dict[str, str] = {}
        origin: dict[str, str] = {}
        for layer in self._layers:
            for k, v in layer.values.items():
                originals[k] = v
                origin[k] = layer.origin
        # node.id and broker.id are synonyms: one given alone stands for both, with the same origin
        # (Kafka's KafkaConfig.populateSynonyms), so DescribeConfigs shows broker.id = node.id.
        for given, missing in (("node.id", "broker.id"), ("broker.id", "node.id")):
            if given in originals and missing not in originals:
                originals[missing], origin[missing] = originals[given], origin[given]
        #: Raw strings as given (file < env < override < dynamic), unknown keys included.
        self.originals: Mapping[str, str] = originals
        self._origin = origin
        values: dict[str, Any] = {}
        for name, d in definitions.items():
            values[name] = d.parse(originals[name]) if name in originals else d.default
        self._values = values
        self._hostname = hostname
        self._validate()

    @classmethod
    def from_props(cls, props: Mapping[str, str], *, hostname: Callable[[], str] = socket.getfqdn) -> BrokerConfig:
        """A config from raw strings as if read from a file (no environment; unknown keys not logged)."""
        return cls([_Layer("file", dict(props))], hostname=hostname)

    # -- Mapping -----------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        given = {k: "[hidden]" if is_secret_key(k, self.definitions) else v for k, v in self.originals.items()}
        return f"BrokerConfig({given!r})"

    # -- provenance --------------------------------------------------------------------------------
    def source(self, key: str) -> ConfigSource:
        """DescribeConfigs source of ``key``: STATIC_BROKER_CONFIG if given, DEFAULT_CONFIG otherwise."""
        if key not in self.definitions:
            raise KeyError(key)
        return _ORIGIN_SOURCE[self._origin.get(key, "default")]

    def origin(self, key: str) -> str:
        """Where ``key`` came from: "default", "file", "env", "override" or "dynamic" (for logs)."""
        if key not in self.definitions:
            raise KeyError(key)
        return self._origin.get(key, "default")

    def is_default(self, key: str) -> bool:
        return self.origin(key) == "default"

    def value_string(self, key: str) -> str | None:
        """The value as Kafka's DescribeConfigs shows it (``"true"``, ``"delete"``, None if unset)."""
        return format_value(self.definitions[key], self._values[key])

    # -- identity ----------------------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        nid = self._values["node.id"]
        return nid if nid >= 0 else self._values["broker.id"]

    @property
    def cluster_id(self) -> str | None:
        return self._values["cluster.id"]

    # -- listeners ---------------------------------------------------------------------------------
    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self._values["listener.security.protocol.map"])

    @property
    def listeners(self) -> list[Listener]:
        """Every listener to bind, in the order given (controller listeners included)."""
        return parse_listeners(self._values["listeners"], self.listener_security_protocol_map)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """Listeners given to clients: advertised.listeners (default: listeners), minus controller ones.

        An empty host is replaced by this machine's fully qualified name, as Kafka registers
        ``InetAddress.getLocalHost.getCanonicalHostName`` for it. ``0.0.0.0``/``::`` are rejected at
        load time.
        """
        return [
            listener if listener.host else Listener(listener.name, listener.security_protocol,
                                                    self._hostname(), listener.port)
            for listener in self._advertised_raw()
        ]

    def _advertised_raw(self) -> list[Listener]:
        raw = self._values["advertised.listeners"]
        pmap = self.listener_security_protocol_map
        if raw is None:
            eps = parse_listeners(self._values["listeners"], pmap)
        else:
            eps = parse_listeners(raw, pmap, key="advertised.listeners", require_distinct_ports=False)
        controller = {n.upper() for n in self._values["controller.listener.names"]}
        return [ep for ep in eps if ep.name not in controller]

    @property
    def inter_broker_listener_name(self) -> str:
        name = self._values["inter.broker.listener.name"]
        return name.upper() if name else self._values["security.inter.broker.protocol"]

    # -- logs --------------------------------------------------------------------------------------
    @property
    def log_dirs(self) -> list[Path]:
        """log.dirs if set, else log.dir; relative paths stay relative to the working directory."""
        raw = self._values["log.dirs"]
        if raw is None:
            raw = self._values["log.dir"]
        return [Path(p) for p in re.split(r"\s*,\s*", raw.strip()) if p]

    @property
    def log_retention_ms(self) -> int:
        """log.retention.ms, else .minutes, else .hours; any negative result means -1 (forever)."""
        ms = self._values["log.retention.ms"]
        if ms is None:
            minutes = self._values["log.retention.minutes"]
            ms = minutes * 60_000 if minutes is not None else self._values["log.retention.hours"] * _HOUR_MS
        return -1 if ms < 0 else ms

    @property
    def log_roll_ms(self) -> int:
        ms = self._values["log.roll.ms"]
        return ms if ms is not None else self._values["log.roll.hours"] * _HOUR_MS

    @property
    def log_roll_jitter_ms(self) -> int:
        ms = self._values["log.roll.jitter.ms"]
        return ms if ms is not None else self._values["log.roll.jitter.hours"] * _HOUR_MS

    @property
    def log_flush_interval_ms(self) -> int:
        ms = self._values["log.flush.interval.ms"]
        return ms if ms is not None else self._values["log.flush.scheduler.interval.ms"]

    @property
    def offsets_retention_ms(self) -> int:
        return self._values["offsets.retention.minutes"] * 60_000

    def log_config(self) -> Any:
        """The topic-level defaults as ``odradek.storage.log_config.LogConfig`` (built from this config).

        ``LogConfig.from_broker_props`` reads the typed values of the broker synonyms (log.*,
        message.max.bytes, ...) through this Mapping; its InvalidConfigError becomes ConfigError.
        """
        # Imported here so that reading a config never pulls in the storage package by accident.
        from odradek.storage.errors import StorageError
        from odradek.storage.log_config import LogConfig

        try:
            return LogConfig.from_broker_props(self)
        except StorageError as e:
            raise ConfigError(f"Invalid log configuration: {e}") from None

    # -- dynamic updates ---------------------------------------------------------------------------
    def with_dynamic(self, updates: Mapping[str, str | None]) -> BrokerConfig:
        """A new config with per-broker dynamic values applied (None deletes a dynamic value).

        Only keys marked ``dynamic`` are accepted; the result is fully re-validated, so a bad update
        raises ConfigError and the running config is untouched.
        """
        current: dict[str, str] = {}
        static_layers = []
        for layer in self._layers:
            if layer.origin == "dynamic":
                current.update(layer.values)
            else:
                static_layers.append(layer)
        for key, value in updates.items():
            d = self.definitions.get(key)
            if d is None:
                raise ConfigError(f"Unknown configuration {key}")
            if not d.dynamic:
                raise ConfigError(f"Cannot update {key} at runtime: it is a read-only (static) broker config")
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        return BrokerConfig([*static_layers, _Layer("dynamic", current)], self.definitions,
                            hostname=self._hostname)

    # -- cross-key validation ----------------------------------------------------------------------
    def _validate(self) -> None:
        check_no_security(self.originals)
        v = self._values
        for kraft_key in ("process.roles", "controller.quorum.voters"):
            if v[kraft_key]:
                raise ConfigError(
                    f"{kraft_key} is KRaft's and Odradek has no KRaft quorum: remove it. Every Odradek node "
                    "runs a broker and a controller candidate; metadata.store=local (the default) runs "
                    "one node alone, metadata.store=etcd://host:port[,host:port...] joins the cluster "
                    "whose controller lease and metadata live in that etcd.")
        node_id, broker_id = v["node.id"], v["broker.id"]
        if node_id >= 0 and broker_id >= 0 and node_id != broker_id:
            raise ConfigError(f"node.id ({node_id}) and broker.id ({broker_id}) must be the same value when both "
                              "are set")
        if node_id < 0 and broker_id < 0:
            raise ConfigError("Missing required configuration node.id: set node.id (or broker.id) to an integer "
                              ">= 0")
        if not self.log_dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir "
                              f"(got log.dirs={v['log.dirs']!r})")

        listeners = self.listeners
        if not listeners:
            raise ConfigError(f"Invalid value {v['listeners']!r} for configuration listeners: at least one "
                              "listener is required, e.g. PLAINTEXT://:9092")
        advertised = self._advertised_raw()
        adv_key = "advertised.listeners" if v["advertised.listeners"] is not None else "listeners"
        if not advertised:
            why = ("it names only controller listeners (controller.listener.names), which are not advertised"
                   if v[adv_key].strip() else "it is empty")
            raise ConfigError(f"Invalid value {v[adv_key]!r} for configuration {adv_key}: no listener to "
                              f"advertise to clients, {why}")
        for ep in advertised:
            if ep.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"Invalid value {v[adv_key]!r} for configuration {adv_key}: advertised.listeners cannot "
                    f"use the nonroutable meta-address {ep.host}; set advertised.listeners to a host name or "
                    "IP address clients can reach"
                )
        listener_names = {ep.name for ep in listeners}
        extra = sorted({ep.name for ep in advertised} - listener_names)
        if extra:
            raise ConfigError(f"Invalid value {v[adv_key]!r} for configuration advertised.listeners: listener "
                              f"names {extra} are not in listeners; valid names are {sorted(listener_names)}")
        if v["inter.broker.listener.name"] is not None and "security.inter.broker.protocol" in self.originals:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set")
        ibl = self.inter_broker_listener_name
        adv_names = [ep.name for ep in advertised]
        if ibl not in adv_names:
            raise ConfigError(
                f"Invalid value {ibl!r} for configuration inter.broker.listener.name: it must be a listener "
                f"name defined in advertised.listeners; valid options are {', '.join(adv_names)}"
            )

        try:
            validate_sasl(self)
        except SaslConfigError as e:
            raise ConfigError(str(e)) from None

        if self.log_retention_ms == 0:
            raise ConfigError("log.retention.ms must be unlimited (-1) or at least 1 "
                              "(from log.retention.ms/minutes/hours)")
        if self.log_roll_ms < 1:
            raise ConfigError(f"Invalid value {self.log_roll_ms} for log.roll.ms: value must be at least 1")
        if self.log_roll_jitter_ms < 0:
            raise ConfigError(f"Invalid value {self.log_roll_jitter_ms} for log.roll.jitter.ms: value must be "
                              "at least 0")
        overrides = parse_ip_overrides(v["max.connections.per.ip.overrides"])
        if v["max.connections.per.ip"] == 0 and not overrides:
            raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                              "property is set.")
        for lo, hi in (
            ("group.min.session.timeout.ms", "group.max.session.timeout.ms"),
            ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
            ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
        ):
            if v[lo] > v[hi]:
                raise ConfigError(f"{hi} ({v[hi]}) must be greater than or equal to {lo} ({v[lo]})")
        # Kafka's GroupCoordinatorConfig: the KIP-848 defaults must lie within their bounds, and a
        # member must be asked to heartbeat more often than its session expires.
        for key, lo, hi in (
            ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
             "group.consumer.max.session.timeout.ms"),
            ("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
             "group.consumer.max.heartbeat.interval.ms"),
        ):
            if v[key] < v[lo]:
                raise ConfigError(f"{key} ({v[key]}) must be greater than or equal to {lo} ({v[lo]})")
            if v[key] > v[hi]:
                raise ConfigError(f"{key} ({v[key]}) must be less than or equal to {hi} ({v[hi]})")
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        # Kafka's ShareGroupConfig / GroupCoordinatorConfig: each share-group default within its bounds.
        for key, lo, hi in (
            ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
             "group.share.max.session.timeout.ms"),
            ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
             "group.share.max.heartbeat.interval.ms"),
            ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
             "group.share.max.record.lock.duration.ms"),
            ("group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
             "group.share.max.delivery.count.limit"),
            ("group.share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
             "group.share.max.partition.max.record.locks"),
        ):
            if v[key] < v[lo]:
                raise ConfigError(f"{key} ({v[key]}) must be greater than or equal to {lo} ({v[lo]})")
            if v[key] > v[hi]:
                raise ConfigError(f"{key} ({v[key]}) must be less than or equal to {hi} ({v[hi]})")
        if v["group.share.heartbeat.interval.ms"] >= v["group.share.session.timeout.ms"]:
            raise ConfigError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")
        # Kafka's GroupCoordinatorConfig requirements of the streams group settings.
        for key, lo, hi in (
            ("group.streams.session.timeout.ms", "group.streams.min.session.timeout.ms",
             "group.streams.max.session.timeout.ms"),
            ("group.streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
             "group.streams.max.heartbeat.interval.ms"),
            ("group.streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
             "group.streams.max.assignment.interval.ms"),
        ):
            if v[hi] < v[lo]:
                raise ConfigError(f"{hi} must be greater than or equal to {lo}")
            if v[key] < v[lo]:
                raise ConfigError(f"{key} must be greater than or equal to {lo}")
            if v[key] > v[hi]:
                raise ConfigError(f"{key} must be less than or equal to {hi}")
        if v["group.streams.heartbeat.interval.ms"] >= v["group.streams.session.timeout.ms"]:
            raise ConfigError("group.streams.heartbeat.interval.ms must be less than group.streams.session.timeout.ms")
        if v["group.streams.num.standby.replicas"] > v["group.streams.max.standby.replicas"]:
            raise ConfigError("group.streams.num.standby.replicas must be less than or equal to "
                              "group.streams.max.standby.replicas")
        if v["group.streams.task.offset.interval.ms"] < v["group.streams.min.task.offset.interval.ms"]:
            raise ConfigError("group.streams.task.offset.interval.ms must be greater than or equal to "
                              "group.streams.min.task.offset.interval.ms")
        if v["group.streams.num.warmup.replicas"] > v["group.streams.max.warmup.replicas"]:
            raise ConfigError("group.streams.num.warmup.replicas must be less than or equal to "
                              "group.streams.max.warmup.replicas")
        if v["group.streams.topology.description.plugin.class"]:
            raise ConfigError("group.streams.topology.description.plugin.class must be unset: Odradek runs no "
                              "Java StreamsGroupTopologyDescriptionPlugin (Kafka's default leaves it unset)")
        tags = v["group.streams.rack.aware.assignment.tags"] or []
        if len(set(tags)) < len(tags):
            raise ConfigError("group.streams.rack.aware.assignment.tags must not contain duplicate tag keys.")


# ---------------------------------------------------------------------------------------------------


# What `odradek` runs with when given neither a config file nor a node.id: exactly the settings of
# the shipped config/server.properties (a unit test keeps the two equal), data in ./data/kafka-logs
# under the directory it was started in, as `make run`.
SINGLE_NODE_DEFAULTS: Mapping[str, str] = {
    "node.id": "1",
    "listeners": "PLAINTEXT://localhost:9092",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "queued.max.requests": "500",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "message.max.bytes": "1048588",
    "log.dirs": "data/kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
    "group.initial.rebalance.delay.ms": "0",
}


def load_config(path: str | os.PathLike[str] | None, overrides: Sequence[str] = (),
                environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """Build the broker's config from defaults < file < environment < ``--override key=value``.

    Logs a warning for every unknown key; raises ConfigError (message names the key, value and the
    accepted values) for a missing file, a malformed file or override, or any invalid value.
    ``environ=None`` reads ``os.environ``; pass ``{}`` to ignore the environment.
    """
    layers: list[_Layer] = []
    if path is not None:
        try:
            layers.append(_Layer("file", load_properties(path)))
        except OSError as e:
            raise ConfigError(f"Cannot read config file {os.fspath(path)!r}: {e.strerror or e}") from None
        except PropertiesError as e:
            raise ConfigError(f"Malformed config file {os.fspath(path)!r}: {e}") from None
    layers.append(_Layer("env", config_from_environ(os.environ if environ is None else environ)))
    layers.append(_Layer("override", parse_overrides(overrides)))
    builtin = path is None and not any(k in layer.values for layer in layers for k in ("node.id", "broker.id"))
    if builtin:
        # `odradek` alone (e.g. after `pip install odradek`) runs the single-node broker of the
        # shipped config/server.properties instead of stopping on a missing node.id.
        layers.insert(0, _Layer("file", dict(SINGLE_NODE_DEFAULTS)))

    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer.values)
    # Before the unknown-key warnings: a security key must stop start-up, not be "ignored".
    check_no_security(merged)
    warned: set[str] = set()
    for layer in layers:
        for key in layer.values:
            if (key not in CONFIG_DEFS and key not in warned and not _is_listener_ssl_key(key)
                    and not is_implemented_sasl_key(key)):
                warned.add(key)
                log.warning("Unknown configuration %r (from %s) is ignored", key, layer.origin)
    cfg = BrokerConfig(layers)
    if builtin:
        # The dirs the broker will use, after the environment and --override (log.dirs=X moves them).
        log.info("No config file and no node.id given: using the built-in single-node configuration "
                 "(config/server.properties' settings), data in %s",
                 ", ".join(str(d.resolve()) for d in cfg.log_dirs))
    cfg.log_config()  # topic-level defaults must be valid too, or start-up stops here, not later
    # TLS key material is loaded now (once, not on every derived config), so bad or missing keys
    # stop start-up with a message naming the key.
    from odradek.broker.security.tls import check_listeners  # late: that module imports this one

    check_listeners(cfg)
    check_advertised_ports(cfg)
    warn_keys_without_effect(cfg)
    return cfg


def is_secret_key(key: str, definitions: Mapping[str, ConfigDef] = CONFIG_DEFS) -> bool:
    """A secret (Kafka's Type.PASSWORD: ssl.keystore.password, ...; a SASL JAAS entry), also under a
    listener prefix: never logged, masked in DescribeConfigs."""
    d = definitions.get(key)
    if d is None and key.startswith("listener.name."):
        # listener.name.<name>.<key>, or listener.name.<name>.<mechanism>.<key> (SASL's)
        rest = key.split(".", 3)[3] if key.count(".") >= 3 else ""
        d = definitions.get(rest)
        if d is None and "." in rest:
            d = definitions.get(rest.split(".", 1)[1])
    return (d is not None and d.type is ConfigType.PASSWORD) or is_sensitive_key(key)


def _is_listener_ssl_key(key: str) -> bool:
    m = LISTENER_SSL_RE.match(key)
    return m is not None and m.group(1) in CONFIG_DEFS


def keys_without_effect(cfg: BrokerConfig) -> list[tuple[str, str]]:
    """(key, why) for every key given (file, environment, --override) that Odradek accepts but does
    not act on (``ConfigDef.no_effect``), in definition order."""
    return [(d.name, d.no_effect) for d in cfg.definitions.values()
            if d.no_effect and cfg.origin(d.name) != "default"]


def warn_keys_without_effect(cfg: BrokerConfig) -> None:
    """One start-up warning naming every key set that has no effect, so nobody tunes a setting that
    changes nothing (Kafka's own configs load unchanged: such keys are accepted, not refused)."""
    keys = keys_without_effect(cfg)
    if keys:
        log.warning("These settings are accepted but have no effect in Odradek: %s",
                    "; ".join(f"{key} ({why})" for key, why in keys))


def check_advertised_ports(cfg: BrokerConfig) -> None:
    """Warn when an advertised listener's port differs from the port its listener binds, unless
    ``odradek.port.mapped.listeners`` says the listener sits behind a port mapping.

    Clients bootstrap anywhere, then connect to exactly what advertised.listeners says: changing only
    ``listeners`` (say to port 9093) while advertised.listeners still says 9092 silently sends every
    client to whatever answers on 9092. Behind a port mapping (docker -p 9093:19092) the difference is
    the point, so a user names such listeners and gets one INFO line instead of a warning that reads
    like an error at every start. Kafka says nothing either way. Unset advertised.listeners means
    ``listeners`` (Kafka's rule), which always matches; a port 0 listener is bound to a free port and
    cannot be checked. Raises ConfigError when odradek.port.mapped.listeners names no listener: a typo
    there would otherwise keep the warning for good without a word about why.
    """
    bound = {ep.name: ep.port for ep in cfg.listeners}
    mapped = [name.strip().upper() for name in cfg["odradek.port.mapped.listeners"] if name.strip()]
    unknown = [name for name in mapped if name not in bound]
    if unknown:
        raise ConfigError(f"odradek.port.mapped.listeners names {', '.join(unknown)}, which listeners does not "
                          f"define (it defines {', '.join(bound)})")
    if cfg["advertised.listeners"] is None:
        return
    for ep in cfg._advertised_raw():
        port = bound.get(ep.name)
        if not (port and ep.port and ep.port != port):
            continue
        if ep.name in mapped:
            log.info("advertised.listeners sends clients to %s:%d, listener %s binds port %d: deliberate port "
                     "mapping (odradek.port.mapped.listeners)", ep.host or "<this host>", ep.port, ep.name, port)
        else:
            log.warning("advertised.listeners sends clients to %s:%d but listener %s binds port %d: clients "
                        "that bootstrap here will connect to port %d. Set advertised.listeners to the same "
                        "port (or leave it unset to advertise listeners) unless a port mapping forwards %d "
                        "to %d; then name %s in odradek.port.mapped.listeners", ep.host or "<this host>",
                        ep.port, ep.name, port, ep.port, ep.port, port, ep.name)


def _check_definitions() -> None:
    # Every default must satisfy its own validator; a typo in the table should fail at import.
    for d in DEFINITIONS:
        if d.validator is not None and d.default is not None:
            d.validator(d.default)


_check_definitions()
