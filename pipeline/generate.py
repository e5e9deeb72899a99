"""Feed the events topic with realistic events (see pipeline/events.py) and some deliberately bad ones.

    python -m pipeline.generate --bootstrap localhost:9092 --events 10000 [--topic events]
        [--users 50] [--bad-ratio 0.03] [--duplicate-ratio 0.02] [--seed 1]
        [--start 2024-05-01T12:00:00Z] [--rate 20] [--first-index auto] [--create-topic --partitions 3]

Events are spread over event time at ``rate`` events per second from ``start``, each jittered by up
to ±5 s (a little out of order, well inside the pipeline's 30 s watermark). A ``duplicate-ratio``
share is sent twice with the same event_id (as an at-least-once producer would). A ``bad-ratio``
share is replaced by one of the invalid shapes in BAD_KINDS; every generated record carries the
error the pipeline must give it, so tests can compute the expected results independently.

The records are produced with librdkafka (confluent-kafka), keyed by user_id, acks=all, idempotent.
Deterministic for a given seed. Who may call it: any single thread.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

# kind -> the error the pipeline must report for it
BAD_KINDS = {
    "not_json": "malformed_json",
    "truncated": "malformed_json",
    "amount_not_number": "invalid_amount",
    "no_user": "missing_user_id",
    "no_amount": "missing_amount",
    "teleport": "unknown_event_type",
    "negative": "negative_amount",
    "bad_time": "invalid_event_time",
}
WEIGHTS = {"view": 60, "click": 25, "purchase": 12, "refund": 3}


@dataclass(frozen=True)
class Generated:
    key: bytes | None
    value: bytes
    event: dict | None  # the valid event as sent (None for a bad record)
    error: str | None  # the dead-letter error expected for a bad record


def _fmt_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _event(rng: random.Random, i: int, start: datetime, rate: float, users: int) -> dict:
    kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    if kind in ("purchase", "refund"):
        amount = Decimal(rng.randint(100, 50000)) / 100
    else:
        amount = Decimal("0.00")
    t = start + timedelta(seconds=i / rate + rng.uniform(-5, 5), milliseconds=rng.randint(0, 999))
    return {"event_id": f"e-{i:07d}", "user_id": f"u-{rng.randrange(users):03d}", "event_type": kind,
            "amount": amount, "event_time": _fmt_time(t)}


def _encode(event: dict) -> bytes:
    # Amounts are JSON numbers with exactly two decimals (json.dumps would go through float).
    fields = [f"{json.dumps(k)}: {f'{v:.2f}' if isinstance(v, Decimal) else json.dumps(v)}" for k, v in event.items()]
    return ("{" + ", ".join(fields) + "}").encode()


def _bad(rng: random.Random, kind: str, base: dict) -> bytes:
    e = dict(base)
    if kind == "not_json":
        return b"this is not json"
    if kind == "truncated":
        return _encode(e)[:25]
    if kind == "amount_not_number":
        e["amount"] = "lots"
        return json.dumps({k: str(v) if isinstance(v, Decimal) else v for k, v in e.items()}).encode()
    if kind == "no_user":
        del e["user_id"]
    elif kind == "no_amount":
        del e["amount"]
    elif kind == "teleport":
        e["event_type"] = "teleport"
    elif kind == "negative":
        e["amount"] = -Decimal(rng.randint(1, 999)) / 100
    elif kind == "bad_time":
        e["event_time"] = "yesterday at noon"
    return _encode(e)


def generate(n: int, seed: int = 1, users: int = 50, bad_ratio: float = 0.03, duplicate_ratio: float = 0.02,
             start: datetime | None = None, rate: float = 20.0, first_index: int = 0) -> list[Generated]:
    """The records to send, in send order (duplicates included).

    Event i (from ``first_index``) happens at start + i/rate seconds (± jitter) with id e-<i>, so a
    second call with first_index = the first call's n continues the same stream.
    """
    rng = random.Random(seed)
    start = start or datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    out: list[Generated] = []
    kinds = sorted(BAD_KINDS)
    for i in range(first_index, first_index + n):
        e = _event(rng, i, start, rate, users)
        if rng.random() < bad_ratio:
            # cycle through the kinds so even small runs cover each one
            kind = kinds[sum(1 for g in out if g.error) % len(kinds)]
            out.append(Generated(e["user_id"].encode(), _bad(rng, kind, e), None, BAD_KINDS[kind]))
            continue
        g = Generated(e["user_id"].encode(), _encode(e), e, None)
        out.append(g)
        if rng.random() < duplicate_ratio:
            out.append(g)
    return out


def produce(bootstrap: str, topic: str, records: list[Generated], extra: dict[str, str] | None = None) -> None:
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  **(extra or {})})
    for r in records:
        while True:
            try:
                p.produce(topic, key=r.key, value=r.value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    if left or errors:
        raise KafkaException(f"{left} records undelivered; errors: {errors[:5]}")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def records_in_topic(bootstrap: str, topic: str) -> int:
    """How many records the topic holds (sum of its partitions' end offsets); 0 if it does not exist.

    Every generated event is at least one record, so starting the next run's event index here gives
    it new event ids and later event times: a second `make pipeline` adds new windows instead of
    resending the first run's events (which the job drops as duplicates and late data).
    """
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-generate-probe",
                  "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions)
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--topic", default="events")
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--bad-ratio", type=float, default=0.03)
    ap.add_argument("--duplicate-ratio", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", default="2024-05-01T12:00:00Z", help="event time of the first event (ISO-8601)")
    ap.add_argument("--rate", type=float, default=20.0, help="events per second of event time")
    ap.add_argument("--first-index", default="auto",
                    help="index of the first event (its id and time); 'auto' (the default) continues after "
                         "what the topic already holds, so each run adds new events")
    ap.add_argument("--create-topic", action="store_true")
    ap.add_argument("--partitions", type=int, default=3)
    a = ap.parse_args(argv)
    if a.create_topic:
        create_topic(a.bootstrap, a.topic, a.partitions)
    start = datetime.fromisoformat(a.start.replace("Z", "+00:00"))
    first = records_in_topic(a.bootstrap, a.topic) if a.first_index == "auto" else int(a.first_index)
    # A different seed per continuation, or every run would repeat the same users and amounts.
    records = generate(a.events, a.seed + first, a.users, a.bad_ratio, a.duplicate_ratio, start, a.rate, first)
    produce(a.bootstrap, a.topic, records)
    bad = sum(1 for r in records if r.error)
    print(f"sent {len(records)} records to {a.topic} (events {first}..{first + a.events - 1}, {bad} invalid, "
          f"{len(records) - a.events} duplicates)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
