"""Ids printed as Kafka prints a Uuid (URL-safe base64, 22 characters) must never start with "-":
Kafka's Uuid.randomUuid regenerates such ids because command-line tools take them for options
(kafka-storage format -t -abc... failed a test run here once in 64)."""

from __future__ import annotations

import base64

from odradek.broker.group.consumer_group import generate_member_id
from odradek.controller.meta_properties import new_cluster_id
from tools.kafka_dist import random_cluster_id


def test_generated_ids_are_kafka_uuids_that_never_start_with_a_dash() -> None:
    # 1 in 64 raw ids starts with "-", so 3 x 3000 ids without the guard would hold ~140 of them.
    for make in (generate_member_id, new_cluster_id, random_cluster_id):
        ids = [make() for _ in range(3000)]
        assert not [i for i in ids if i.startswith("-")], make.__name__
        assert all(len(i) == 22 and len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
        assert len(set(ids)) == len(ids)
