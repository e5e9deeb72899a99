"""A quixstreams application with state, run by tests/integration/test_stream_apps.py as a process of its
own, with quixstreams and its own confluent-kafka on PYTHONPATH (tests/support/stream_apps.py: quixstreams
3.28 requires confluent-kafka < 2.13, so it is installed apart from the venv):
``python tests/support/quix_counter.py BOOTSTRAP APP_ID STATE_DIR``.

It counts the words of ``<APP_ID>-words`` per word in its state (a RocksDB store under STATE_DIR whose
every change quixstreams also writes to a changelog topic) and sends ``word=count`` to
``<APP_ID>-counted``. A process started with an empty STATE_DIR (a new machine) rebuilds the store
from the changelog topic before it processes anything. Runs until SIGTERM (quixstreams stops cleanly
on it, committing what it processed).
"""

from __future__ import annotations

import logging
import sys

from quixstreams import Application, State


def count(word: str, state: State) -> str:
    n = state.get("count", 0) + 1
    state.set("count", n)
    return f"{word}={n}"


def main(bootstrap: str, app_id: str, state_dir: str) -> None:
    app = Application(broker_address=bootstrap, consumer_group=app_id, state_dir=state_dir,
                      auto_offset_reset="earliest", loglevel="INFO")
    words = app.topic(f"{app_id}-words", key_deserializer="str", value_deserializer="str")
    counted = app.topic(f"{app_id}-counted", key_serializer="str", value_serializer="str")
    sdf = app.dataframe(words)
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(counted)
    app.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(*sys.argv[1:4])
