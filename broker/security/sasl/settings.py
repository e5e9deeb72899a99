"""Each SASL listener's settings, built and checked from the broker config at start-up.

Kafka's keys and lookup order (KafkaConfig / JaasContext.loadServerContext):
- mechanisms: ``listener.name.<l>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``
  (default GSSAPI);
- a mechanism's JAAS entry: ``listener.name.<l>.<mechanism lower-case>.sasl.jaas.config``. PLAIN
  needs one (its ``user_<name>`` options are the users); SCRAM's is optional here (its
  username/password are what this broker sends when the inter-broker listener uses SCRAM);
  OAUTHBEARER's optional OAuthBearerLoginModule options configure the unsecured JWS validator.

Start-up stops (ConfigError naming the key) when a SASL listener would enable a mechanism Odradek
does not implement (GSSAPI, Kafka's default), none at all, or PLAIN without users; and
when the inter-broker listener is SASL but ``sasl.mechanism.inter.broker.protocol`` is not enabled on
it or has no username/password in its JAAS entry. No message contains a JAAS value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.broker.security.sasl.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    JaasEntry,
    parse_jaas_config,
)
from odradek.broker.security.sasl.keys import listener_jaas_key, listener_mechanisms_key
from odradek.broker.security.sasl.oauthbearer import OAUTHBEARER
from odradek.broker.security.sasl.plain import PLAIN, plain_users
from odradek.broker.security.sasl.scram_formatter import MECHANISMS_BY_NAME

SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS_BY_NAME, OAUTHBEARER)
_LOGIN_MODULES = {PLAIN: PLAIN_LOGIN_MODULE, OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE,
                  **{m: SCRAM_LOGIN_MODULE for m in MECHANISMS_BY_NAME}}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class _Config(Protocol):
    """What this module reads of odradek.broker.config.broker_config.BrokerConfig (no import: config imports us)."""

    originals: Mapping[str, str]

    def __getitem__(self, key: str) -> Any: ...

    @property
    def listeners(self) -> Any: ...

    @property
    def inter_broker_listener_name(self) -> str: ...


class SaslConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SaslListenerSettings:
    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(repr=False)
    # Mechanism -> the JAAS entry's options (username/password for this broker's own client side).
    jaas_options: Mapping[str, Mapping[str, str]] = field(repr=False)
    max_receive_size: int = 524288
    failed_authentication_delay_ms: int = 100
    max_reauth_ms: int = 0


@dataclass(frozen=True)
class InterBrokerSasl:
    """What this broker sends when it connects to another broker's SASL inter-broker listener."""

    mechanism: str
    username: str
    password: str = field(repr=False)


def _mechanisms(cfg: _Config, listener: str) -> tuple[tuple[str, ...], str]:
    key = listener_mechanisms_key(listener)
    raw = cfg.originals.get(key)
    if raw is None:
        return tuple(cfg["sasl.enabled.mechanisms"]), "sasl.enabled.mechanisms"
    return tuple(m.strip() for m in raw.split(",") if m.strip()), key


def _jaas_entry(cfg: _Config, listener: str, mechanism: str) -> JaasEntry | None:
    key = listener_jaas_key(listener, mechanism)
    raw = cfg.originals.get(key)
    if raw is None:
        return None
    try:
        entries = parse_jaas_config(raw)
    except JaasConfigError as e:
        raise SaslConfigError(f"Invalid value for configuration {key}: {e}") from None
    if len(entries) != 1:
        raise SaslConfigError(f"Invalid value for configuration {key}: JAAS config property contains "
                              f"{len(entries)} login modules, should be 1 module")
    entry = entries[0]
    expected = _LOGIN_MODULES[mechanism]
    if entry.login_module != expected:
        raise SaslConfigError(f"Invalid value for configuration {key}: mechanism {mechanism} needs login module "
                              f"{expected}, got {entry.login_module}")
    return entry


def listener_settings(cfg: _Config) -> dict[str, SaslListenerSettings]:
    """Every SASL listener's settings by listener name; SaslConfigError on anything unusable."""
    out: dict[str, SaslListenerSettings] = {}
    for lst in cfg.listeners:
        if lst.security_protocol not in SASL_PROTOCOLS:
            continue
        mechanisms, key = _mechanisms(cfg, lst.name)
        if not mechanisms:
            raise SaslConfigError(f"{key} is empty: listener {lst.name} ({lst.security_protocol}) needs at least one "
                                  f"SASL mechanism ({', '.join(SUPPORTED_MECHANISMS)})")
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            default = " (Kafka's default)" if key == "sasl.enabled.mechanisms" and "GSSAPI" in unsupported else ""
            raise SaslConfigError(
                f"{key} enables {', '.join(unsupported)}{default} on listener {lst.name}, which Odradek does not "
                f"implement; set {key} to mechanisms among {', '.join(SUPPORTED_MECHANISMS)}")
        jaas: dict[str, Mapping[str, str]] = {}
        for mechanism in mechanisms:
            entry = _jaas_entry(cfg, lst.name, mechanism)
            if entry is not None:
                jaas[mechanism] = dict(entry.options)
        users: dict[str, str] = {}
        if PLAIN in mechanisms:
            users = plain_users(jaas.get(PLAIN, {}))
            if PLAIN not in jaas:
                raise SaslConfigError(
                    f"PLAIN is enabled on listener {lst.name} but {listener_jaas_key(lst.name, PLAIN)} is not set: "
                    f"set it to '{PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\" ...;'")
        out[lst.name] = SaslListenerSettings(
            lst.name, mechanisms, users, jaas,
            max_receive_size=cfg["sasl.server.max.receive.size"],
            failed_authentication_delay_ms=cfg["connection.failed.authentication.delay.ms"],
            max_reauth_ms=cfg["connections.max.reauth.ms"],
        )
    return out


def inter_broker_sasl(cfg: _Config, settings: Mapping[str, SaslListenerSettings]) -> InterBrokerSasl | None:
    """The credentials for the inter-broker listener when it is SASL (None when it is not)."""
    listener = cfg.inter_broker_listener_name
    lst = settings.get(listener)
    if lst is None:
        return None
    mechanism = cfg["sasl.mechanism.inter.broker.protocol"]
    if mechanism not in lst.mechanisms:
        raise SaslConfigError(
            f"sasl.mechanism.inter.broker.protocol ({mechanism}) must be included in {listener_mechanisms_key(listener)}"
            f" or sasl.enabled.mechanisms when SASL is used for inter-broker communication (listener {listener} "
            f"enables {', '.join(lst.mechanisms)})")
    if mechanism == OAUTHBEARER:
        raise SaslConfigError("sasl.mechanism.inter.broker.protocol=OAUTHBEARER is not implemented for brokers' own "
                              "connections; use PLAIN or SCRAM-SHA-256/512 between brokers")
    options = lst.jaas_options.get(mechanism, {})
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise SaslConfigError(
            f"{listener_jaas_key(listener, mechanism)} must set username and password: this broker authenticates "
            f"with them to other brokers' inter-broker listener {listener}")
    return InterBrokerSasl(mechanism, username, password)


def validate(cfg: _Config) -> None:
    """Raise SaslConfigError if the SASL settings cannot be served (called at config load)."""
    inter_broker_sasl(cfg, listener_settings(cfg))
