"""kafka-python 2.0.2's whole round trip, run as a script with only its own install on PYTHONPATH
(tests/support/old_clients.py) so that the venv's kafka-python 3.x stays out of the way:

    PYTHONPATH=.cache/old-clients/kafka-python-2.0.2 python tests/support/old_kafka_python_smoke.py \
        BOOTSTRAP TOPIC GROUP COUNT

The same steps and output as tests/support/java/OldJavaClientSmoke.java: COUNT records
"key-i"/"value-i" (acks=all) to partition 0, consumed back in GROUP (subscribe: a classic group),
a synchronous commit, then a second consumer of GROUP reads the committed offset back. Lines:

    client VERSION API_VERSION     (kafka-python's version, the broker version it inferred)
    produced PARTITION OFFSET
    consumed PARTITION OFFSET KEY VALUE
    committed PARTITION OFFSET

Any exception ends it with a traceback and exit 1.
"""

from __future__ import annotations

import sys
import time

import kafka  # type: ignore[import-untyped]  # kafka-python 2.0.2 ships no type hints
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def main(bootstrap: str, topic: str, group: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    print("client", kafka.__version__, ".".join(map(str, producer.config["api_version"])))
    for i in range(count):
        md = producer.send(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode(), partition=0).get(timeout=30)
        print("produced", md.partition, md.offset)
    producer.close()

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    for r in got:
        print("consumed", r.partition, r.offset, r.key.decode(), r.value.decode())
    consumer.commit()
    consumer.close()

    # A new member of the group: what it reads is what the broker stored for the group.
    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    committed = reader.committed(TopicPartition(topic, 0))
    print("committed", 0, -1 if committed is None else committed)
    reader.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
