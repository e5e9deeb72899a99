"""Client quota rules without a broker: Kafka's precedence over all eight levels, the sampled rate
and throttle time (Rate / QuotaUtils), the entity and value validation of AlterClientQuotas and the
controller's records."""

from __future__ import annotations

import pytest

from odradek.broker.quota.client_quotas import ClientQuotas
from odradek.broker.quota.entities import make_entity, matches, parse_filter, resolve
from odradek.broker.runtime.rate import Rate, throttle_time_ms
from odradek.controller.client_quotas import (
    ClientQuotaAlteration,
    QuotaRequestError,
    alter_client_quotas,
    validate_entity,
)
from odradek.controller.image import MetadataImage, apply
from odradek.controller.records import ClientQuotaRecord, record_from_dict, record_to_dict

U, C = "alice", "app"
# Kafka's order, most specific first, with the metric tags (user, client-id) sharing the rate.
LEVELS = [
    (make_entity([("user", U), ("client-id", C)]), (U, C)),
    (make_entity([("user", U), ("client-id", None)]), (U, C)),
    (make_entity([("user", U)]), (U, "")),
    (make_entity([("user", None), ("client-id", C)]), (U, C)),
    (make_entity([("user", None), ("client-id", None)]), (U, C)),
    (make_entity([("user", None)]), (U, "")),
    (make_entity([("client-id", C)]), ("", C)),
    (make_entity([("client-id", None)]), ("", C)),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_picks_the_most_specific_level(level: int) -> None:
    quotas = {entity: float(i) for i, (entity, _) in enumerate(LEVELS) if i >= level}
    tags, bound = resolve(quotas, U, C)  # type: ignore[misc]
    assert bound == float(level)
    assert tags == LEVELS[level][1]


def test_precedence_ignores_other_users_and_clients() -> None:
    quotas = {make_entity([("user", "bob")]): 1.0, make_entity([("client-id", "other")]): 2.0,
              make_entity([("user", "bob"), ("client-id", C)]): 3.0}
    assert resolve(quotas, U, C) is None
    assert resolve(quotas, "bob", C) == (("bob", C), 3.0)


def test_managers_keep_quota_keys_apart() -> None:
    quotas = ClientQuotas(11, 1, clock=lambda: 0.0)
    quotas.update({make_entity([("user", U)]): {"consumer_byte_rate": 10.0},
                   make_entity([("client-id", C)]): {"producer_byte_rate": 20.0},
                   make_entity([("ip", "1.2.3.4")]): {"connection_creation_rate": 3.0}})
    assert quotas.active
    # produce: the user level has no producer quota, so the client-id level applies
    assert quotas.produce.resolve(U, C) == (("", C), 20.0)
    assert quotas.fetch.resolve(U, C) == ((U, ""), 10.0)
    assert quotas.request.resolve(U, C) is None
    switched: list[bool] = []
    quotas.on_active = switched.append
    quotas.update({make_entity([("ip", "1.2.3.4")]): {"connection_creation_rate": 3.0}})
    assert not quotas.active and switched == [False], "ip quotas alone do not involve the request path"


def test_rate_counts_a_new_client_over_the_minimum_window() -> None:
    rate = Rate(11, 1000)
    rate.record(5000, 0)
    assert rate.window_size_ms(0) == 10_000  # (samples - 1) full windows
    assert rate.measure(0) == pytest.approx(500.0)
    rate.record(5000, 2500)
    assert rate.window_size_ms(2500) == 10_500  # 2 full windows + the fraction, padded to 10
    assert rate.measure(2500) == pytest.approx(10_000 / 10.5)


def test_rate_forgets_samples_older_than_all_windows() -> None:
    rate = Rate(3, 1000)
    rate.record(9000, 0)
    rate.record(10, 1000)
    rate.record(10, 2000)
    assert rate.measure(2000) == pytest.approx(9020 / 2.0)
    assert rate.measure(3000) == pytest.approx(20 / 2.0)  # the first sample expired (3 windows old)


def test_throttle_time_is_kafkas() -> None:
    rate = Rate(11, 1000)
    rate.record(3000, 0)  # 300 B/s measured over 10 s
    assert throttle_time_ms(rate, 300.0, 0) == 0  # at the bound is acceptable
    assert throttle_time_ms(rate, 100.0, 0) == 20_000  # (300 - 100) / 100 * 10 s
    assert throttle_time_ms(rate, 100.0, 0, max_ms=1000) == 1000  # bounded (request quota)
    assert throttle_time_ms(rate, 0.0, 0, max_ms=1000) == 1000  # a zero quota holds the longest


@pytest.mark.parametrize(("pairs", "message"), [
    ([], "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], "Invalid empty client quota entity, duplicate entity entry user"),
    ([("topic", "t")], "Unhandled client quota entity type: topic"),
    ([("client-id", "")], "Empty client-id not supported"),
    ([("ip", None), ("client-id", None)], "Invalid empty client quota entity"),
])
def test_entity_validation(pairs, message: str) -> None:
    with pytest.raises(QuotaRequestError) as info:
        validate_entity(pairs)
    assert info.value.message == message


def test_controller_writes_only_changes_and_image_applies_them() -> None:
    image = MetadataImage()
    entity = (("client-id", "c"),)
    records, results = alter_client_quotas(image, [ClientQuotaAlteration(entity, (("producer_byte_rate", 100.0),
                                                                                  ("consumer_byte_rate", None)))])
    assert [r.error_code for r in results] == [0]
    assert records == [ClientQuotaRecord(entity, "producer_byte_rate", 100.0)], "removing an unset key writes nothing"
    for r in records:
        apply(image, record_from_dict(record_to_dict(r)))  # through the log's encoding
    assert image.client_quotas == {entity: {"producer_byte_rate": 100.0}}
    again, _ = alter_client_quotas(image, [ClientQuotaAlteration(entity, (("producer_byte_rate", 100.0),))])
    assert again == [], "an unchanged value writes nothing"
    removal, _ = alter_client_quotas(image, [ClientQuotaAlteration(entity, (("producer_byte_rate", None),))])
    for r in removal:
        apply(image, r)
    assert image.client_quotas == {}


def test_duplicate_entity_in_one_request() -> None:
    entity = (("user", "u"),)
    records, results = alter_client_quotas(MetadataImage(), [
        ClientQuotaAlteration(entity, (("producer_byte_rate", 1.0),)),
        ClientQuotaAlteration(entity, (("producer_byte_rate", 2.0),)),
    ])
    assert len(results) == 1 and "Ignoring duplicate entity" in (results[0].error_message or "")
    assert [r.value for r in records] == [1.0]  # as Kafka: the first occurrence is applied


def test_describe_filter_matching() -> None:
    exact, typed = parse_filter([{"entity_type": "user", "match_type": 1, "match": None},
                                 {"entity_type": "client-id", "match_type": 2, "match": None}])
    assert matches(make_entity([("user", None), ("client-id", "x")]), exact, typed, strict=True)
    assert not matches(make_entity([("user", "u"), ("client-id", "x")]), exact, typed, strict=False)
    assert not matches(make_entity([("user", None)]), exact, typed, strict=False)
