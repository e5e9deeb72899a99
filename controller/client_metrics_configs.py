"""Client metrics subscriptions (KIP-714): the CLIENT_METRICS config resource, as Kafka's ClientMetricsConfigs.

A subscription is a named config resource of type CLIENT_METRICS (16) holding three keys, stored in
the metadata log as ConfigRecords of that type (Kafka stores them the same way):

    key          type  default   meaning
    metrics      LIST  (empty)   metric name prefixes the matching clients push; "*" is every metric
    interval.ms  INT   300000    push interval, 100 .. 3600000 ms
    match        LIST  (empty)   selectors ``<attribute>=<regular expression>``, all of which a client must
                                 fully match (none: every client); attributes: client_instance_id,
                                 client_id, client_software_name, client_software_version,
                                 client_source_address, client_source_port

``validate(name, props)`` is Kafka's ClientMetricsConfigs.validate over a resource's complete set of
values after an alteration (the controller calls it before writing), raising
``ClientMetricsConfigError`` with Kafka 4.4's code and message, in Kafka's order:

1. an empty name: INVALID_REQUEST "Subscription name can't be empty";
2. a key outside the three: INVALID_REQUEST "Unknown client metrics configuration: <key>";
3. a value of the wrong type (ConfigDef.parse): INVALID_CONFIG "Invalid value <v> for configuration
   interval.ms: Not a number of type INT";
4. interval.ms outside its bounds: INVALID_REQUEST "Invalid value <v> for interval.ms, interval must be
   between 100 and 3600000 (1 hour)";
5. a selector that is not ``attribute=regex`` with a known attribute and a regex that compiles:
   INVALID_CONFIG "Illegal client matching pattern: <selector>".

Values are parsed as Java's ConfigDef parses them (``parse_list``, ``parse_int``): a LIST is the
value trimmed, split at commas with the whitespace around them; an INT is Java's Integer.parseInt of
the trimmed value. Duplicates in a list are accepted, as Kafka 4.4 accepts them. The regular
expressions are compiled by Python's ``re``, which agrees with Java's on what selectors use
(classes, groups, alternation, quantifiers); a Java-only construct (possessive quantifiers,
``\\p{javaLowerCase}``) is refused as an illegal pattern.

``describe(props)`` is what DescribeConfigs shows for one subscription (Kafka 4.4's ConfigHelper):
every key in name order, its set value (source CLIENT_METRICS_CONFIG, 7, with itself as the one
synonym) or its default (source DEFAULT_CONFIG, 5, no synonym), lists written back joined by ",".

Pure functions; any thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.protocol.errors import ErrorCode

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
ALL_METRICS = "*"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000

# The client attributes a selector may name (ClientMetricsConfigs.ALLOWED_MATCH_PARAMS).
CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
MATCH_ATTRIBUTES = frozenset({CLIENT_INSTANCE_ID, CLIENT_ID, CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION,
                              CLIENT_SOURCE_ADDRESS, CLIENT_SOURCE_PORT})

# DescribeConfigs' config_source and config_type ids (Kafka's DescribeConfigsResponse.ConfigSource/ConfigType).
SOURCE_CLIENT_METRICS = 7
SOURCE_DEFAULT = 5
TYPE_INT = 3
TYPE_LIST = 7


@dataclass(frozen=True)
class KeyDef:
    name: str
    config_type: int
    default: str
    documentation: str


# In Kafka's ConfigDef order (metrics, interval.ms, match); the documentation is Kafka's.
KEYS: dict[str, KeyDef] = {
    METRICS: KeyDef(METRICS, TYPE_LIST, "", "Telemetry metric name prefix list"),
    INTERVAL_MS: KeyDef(INTERVAL_MS, TYPE_INT, str(INTERVAL_MS_DEFAULT), "Metrics push interval in milliseconds"),
    MATCH: KeyDef(MATCH, TYPE_LIST, "", "Client match criteria"),
}


class ClientMetricsConfigError(ValueError):
    """A subscription's configs are refused: ``code`` and ``str(e)`` are Kafka's."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Subscription:
    """One parsed subscription: what ClientMetricsManager.SubscriptionInfo holds."""

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        """Every selector fully matches the client's attribute (no selector: every client)."""
        for key, pattern in self.match:
            value = attributes.get(key)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def java_trim(text: str) -> str:
    """Java's String.trim: strips code points up to U+0020 at both ends (not Unicode spaces)."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


_LIST_SEPARATOR = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")  # ConfigDef's COMMA_WITH_WHITESPACE
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_list(value: str) -> list[str]:
    """ConfigDef.parseType(LIST): the trimmed value split at commas (and the whitespace around them)."""
    trimmed = java_trim(value)
    return [] if trimmed == "" else _LIST_SEPARATOR.split(trimmed)


def parse_int(key: str, value: str) -> int:
    """ConfigDef.parseType(INT): Integer.parseInt of the trimmed value."""
    trimmed = java_trim(value)
    if _JAVA_INT.fullmatch(trimmed) and -(2**31) <= int(trimmed) < 2**31:
        return int(trimmed)
    raise ClientMetricsConfigError(ErrorCode.INVALID_CONFIG,
                                   f"Invalid value {value} for configuration {key}: Not a number of type INT")


def _java_split_equals(text: str) -> list[str]:
    """Java's ``text.split("=")``: trailing empty strings are dropped (not a leading one)."""
    parts = text.split("=")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def parse_match(selectors: list[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """ClientMetricsConfigs.parseMatchingPatterns: (attribute, compiled regex) per selector."""
    out: dict[str, re.Pattern[str]] = {}
    for selector in selectors:
        parts = _java_split_equals(selector)
        illegal = ClientMetricsConfigError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {selector}")
        if len(parts) != 2:
            raise illegal
        key = java_trim(parts[0])
        if key not in MATCH_ATTRIBUTES:
            raise illegal
        try:
            out[key] = re.compile(java_trim(parts[1]))
        except re.error:
            raise illegal from None
    return tuple(out.items())


def validate(name: str, props: Mapping[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate (module docstring: the checks and their order)."""
    parse(name, props)


def parse(name: str, props: Mapping[str, str]) -> Subscription:
    """The subscription ``props`` describe; raises ClientMetricsConfigError as ``validate``."""
    if not name:
        raise ClientMetricsConfigError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in props:
        if key not in KEYS:
            raise ClientMetricsConfigError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    metrics = parse_list(props.get(METRICS, ""))
    interval = parse_int(INTERVAL_MS, props[INTERVAL_MS]) if INTERVAL_MS in props else INTERVAL_MS_DEFAULT
    selectors = parse_list(props.get(MATCH, ""))
    if INTERVAL_MS in props and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise ClientMetricsConfigError(
            ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
            f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    return Subscription(name, tuple(metrics), interval, parse_match(selectors))


@dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str
    source: int
    config_type: int
    documentation: str


def describe(props: Mapping[str, str]) -> list[DescribedConfig]:
    """DescribeConfigs' entries for a subscription with ``props`` (none set: the defaults)."""
    out = []
    for key in sorted(KEYS):
        d = KEYS[key]
        raw = props.get(key)
        if raw is None:
            out.append(DescribedConfig(key, d.default, SOURCE_DEFAULT, d.config_type, d.documentation))
            continue
        value = str(parse_int(key, raw)) if d.config_type == TYPE_INT else ",".join(parse_list(raw))
        out.append(DescribedConfig(key, value, SOURCE_CLIENT_METRICS, d.config_type, d.documentation))
    return out
