"""A faust-streaming application with a table, run by tests/integration/test_stream_apps.py as a worker
process of its own: ``python -m tests.support.faust_counter BOOTSTRAP APP_ID DATA_DIR``.

The agent reads words from the topic ``<APP_ID>-words`` and counts them in the table ``counts`` (faust
keeps a table in memory and writes every change to its changelog topic,
``<APP_ID>-counts-changelog``, from which a restarted worker rebuilds it before its agents run); after
each count it sends ``word=count`` to ``<APP_ID>-counted``, where the test reads what the table held.
Runs until SIGTERM (faust's worker stops cleanly on it).
"""

from __future__ import annotations

import sys

import faust
from faust.types import StreamT


def build_app(bootstrap: str, app_id: str, data_dir: str) -> faust.App:
    app = faust.App(app_id, broker=f"kafka://{bootstrap}", datadir=data_dir, store="memory://",
                    topic_partitions=1, topic_replication_factor=1, web_enabled=False,
                    # A restarted worker waits for nothing before it takes its partitions back.
                    broker_session_timeout=10, producer_acks=-1)
    # Plain bytes on both topics (faust's default is JSON), so any client writes and reads them.
    words = app.topic(f"{app_id}-words", key_serializer="raw", value_serializer="raw")
    counted = app.topic(f"{app_id}-counted", key_serializer="raw", value_serializer="raw")
    counts = app.Table("counts", default=int, partitions=1)

    @app.agent(words)
    async def count(stream: StreamT) -> None:
        async for raw in stream:
            word = raw.decode()
            counts[word] += 1
            await counted.send(key=raw, value=f"{word}={counts[word]}".encode())

    return app


if __name__ == "__main__":
    bootstrap, app_id, data_dir = sys.argv[1:4]
    # App.main() runs faust's command line on sys.argv.
    sys.argv = ["faust", "worker", "--loglevel", "info"]
    build_app(bootstrap, app_id, data_dir).main()
