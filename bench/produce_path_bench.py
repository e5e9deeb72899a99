"""Per-request cost of a Produce on Odradek's handler loop, in-process (issue 18's budget).

Starts a real Broker in this process (its listeners bound, nobody connecting), creates a topic,
then feeds the dispatcher real Produce v9 frames the way the request channel does
(``Dispatcher.process(conn, slot, frame)`` on the handler loop) through a sink connection that
keeps the response chunks. Every frame carries fresh batches (their CRCs are real; librdkafka's
shape: 1 KiB records, a 64 KiB batch per partition, acks=1, no producer id), appended to real
logs on disk. Reported per request: wall and thread-CPU microseconds, median over rounds.

    python bench/produce_path_bench.py [--partitions-per-request 1] [--batch-kib 64] [--requests 4000]
                                       [--rounds 7] [--profile]   # --profile: cProfile one round
                                       [--version 13]   # another Produce version (v13: by topic id)

``--stages`` also times each stage of the path by itself on the same frames (peek + header
decode, body decode, the handler minus the append, Log.append, response encode), so the budget in
docs/performance.md can be read off one run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.native_load import compressible_value  # noqa: E402
from odradek.broker.config.broker_config import load_config  # noqa: E402
from odradek.broker.server import Broker  # noqa: E402
from odradek.protocol.codec import codec  # noqa: E402
from odradek.protocol.headers import encode_request_header  # noqa: E402
from odradek.protocol.records import Record, encode_batch  # noqa: E402

TOPIC = "bench"


class SinkConnection:
    """Stands where a network connection would: the dispatcher hands it the response chunks."""

    closed = False
    peer = "bench"
    sasl = None  # a plaintext listener: the dispatcher's SASL interception is off

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from odradek.broker.security.principal import ANONYMOUS

        self.loop = loop
        self.principal = ANONYMOUS
        self.responses = 0
        self.last: Any = None

    def complete(self, slot: Any, chunks: Any) -> None:
        self.responses += 1
        self.last = chunks

    def close(self) -> None:
        raise RuntimeError("the broker closed the bench connection")

    close_threadsafe = close


def make_batch(record_size: int, batch_bytes: int, compression: int = 0, compressible: bool = False) -> bytes:
    """``batch_bytes`` of ``record_size`` records, compressed with codec ``compression``; random values
    (incompressible), or with ``compressible`` JSON-like event records (what a codec is chosen for)."""
    count = max(1, batch_bytes // (record_size + 10))
    now = int(time.time() * 1000)
    values = [compressible_value(i, record_size) if compressible else os.urandom(record_size) for i in range(count)]
    return encode_batch([Record(timestamp=now, value=v) for v in values], compression=compression)


def produce_frame(correlation_id: int, partitions: list[int], batch: bytes, version: int = 9,
                  topic_id: Any = None) -> bytes:
    """A Produce request to TOPIC; from v13 the topic is named by ``topic_id`` (KIP-516)."""
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "topic_id": topic_id,
                        "partition_data": [{"index": p, "records": batch} for p in partitions]}],
    }
    header = bytearray()
    encode_request_header(header, 0, version, correlation_id, "bench", version >= 9)
    return bytes(header) + codec("ProduceRequest", version).encode(body)


async def create_topic(broker: Broker, partitions: int) -> None:
    conn = SinkConnection(asyncio.get_running_loop())
    body = {"topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False}
    header = bytearray()
    encode_request_header(header, 19, 7, 1, "bench", True)
    frame = bytes(header) + codec("CreateTopicsRequest", 7).encode(body)
    assert broker.dispatcher is not None
    broker.dispatcher.process(conn, object(), frame)  # type: ignore[arg-type]
    for _ in range(200):
        await asyncio.sleep(0.02)
        if all((TOPIC, p) in broker.replica_manager.partitions for p in range(partitions)):
            return
    raise RuntimeError("topic not created")


def run_round(broker: Broker, conn: SinkConnection, frames: list[bytes]) -> tuple[float, float]:
    process = broker.dispatcher.process  # type: ignore[union-attr]
    slot = object()
    t0, c0 = time.perf_counter(), time.thread_time()
    for frame in frames:
        process(conn, slot, frame)  # type: ignore[arg-type]
    t1, c1 = time.perf_counter(), time.thread_time()
    n = len(frames)
    return (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6


def stages(broker: Broker, frames: list[bytes], partitions: int) -> dict[str, float]:
    """Each stage alone, over the same frames (thread CPU us per request, one pass)."""
    from odradek.broker.api.dispatcher import encode_response
    from odradek.protocol.codec import is_flexible
    from odradek.protocol.headers import decode_request_header, peek_api

    out: dict[str, float] = {}

    def timed(name: str, fn: Any, passes: int = 1) -> Any:
        # The least of ``passes`` passes: the stage's own cost with the least interference.
        best = float("inf")
        for _ in range(passes):
            c0 = time.thread_time()
            result = [fn(f) for f in frames]
            best = min(best, (time.thread_time() - c0) / len(frames) * 1e6)
        out[name] = best
        return result

    flexible = is_flexible("ProduceRequest", 9)
    timed("peek + header decode", lambda f: (peek_api(f), decode_request_header(memoryview(f), flexible)), 3)
    header_end = decode_request_header(memoryview(frames[0]), flexible).body_offset
    request_codec = codec("ProduceRequest", 9)
    bodies = timed("body decode", lambda f: request_codec.decode(memoryview(f), header_end)[0], 3)
    rm = broker.replica_manager
    logs = [rm.partitions[(TOPIC, p)].log for p in range(partitions)]

    def append_only(body: dict) -> None:
        for pd in body["topic_data"][0]["partition_data"]:
            logs[pd["index"]].append(pd["records"], leader_epoch=0)

    timed("Log.append (CRC, scan, pwritev, index)", lambda f: append_only(bodies.pop(0)) if bodies else None)
    from odradek.protocol.checksum import crc32c
    body = request_codec.decode(memoryview(frames[0]), header_end)[0]
    records = [memoryview(pd["records"]) for pd in body["topic_data"][0]["partition_data"]]
    timed("  of which CRC32C", lambda f: [crc32c(r[21:]) for r in records], 3)
    from odradek.storage.record_validator import plain_records_ok
    rec0 = records[0]
    n_records = int.from_bytes(rec0[57:61], "big")
    timed("  of which record scan", lambda f: [plain_records_ok(r, len(r), 0, n_records, 1 << 20) for r in records], 3)
    fd = os.open(os.path.join(tempfile.gettempdir(), f"ppb-{os.getpid()}"), os.O_RDWR | os.O_CREAT)
    try:
        at = [0]

        def write(_f: bytes) -> None:
            at[0] += os.pwritev(fd, [records[0]], at[0])

        timed("  of which a bare pwritev of the batch", write)
    finally:
        os.close(fd)
        os.unlink(os.path.join(tempfile.gettempdir(), f"ppb-{os.getpid()}"))
    response = {"responses": [{"name": TOPIC, "partition_responses": [
        {"index": p, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None} for p in range(partitions)]}], "throttle_time_ms": 0}
    timed("response encode", lambda f: encode_response("ProduceResponse", 9, 7, response, True), 3)
    return out


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="odradek-ppb-") as tmp:
        config = load_config(None, [f"log.dirs={tmp}/logs", "node.id=1", "listeners=PLAINTEXT://127.0.0.1:0",
                                    "num.network.threads=1", f"num.partitions={args.partitions}",
                                    *args.override], environ={})
        broker = Broker(config)
        await broker.start()
        try:
            await create_topic(broker, args.partitions)
            conn = SinkConnection(asyncio.get_running_loop())
            per_req = args.partitions_per_request
            batches = [make_batch(args.record_size, args.batch_kib * 1024) for _ in range(8)]
            topic_id = next(i for i, t in broker.metadata.image.topics_by_id.items() if t.name == TOPIC)
            frames = [produce_frame(i, [(i * per_req + k) % args.partitions for k in range(per_req)], batches[i % 8],
                                    args.version, topic_id)
                      for i in range(args.requests)]
            run_round(broker, conn, frames[: max(50, args.requests // 10)])  # warm-up
            walls, cpus = [], []
            for _ in range(args.rounds):
                wall, cpu = run_round(broker, conn, frames)
                walls.append(wall)
                cpus.append(cpu)
                await asyncio.sleep(0)
            assert conn.responses >= args.requests, "responses missing"
            print(f"Produce v{args.version}, {per_req} partition(s) x {len(batches[0])} B batch of {args.record_size} B records, "
                  f"{args.requests} requests x {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
            print(f"  per request: wall median {statistics.median(walls):.1f} us (min {min(walls):.1f}), "
                  f"thread CPU median {statistics.median(cpus):.1f} us (min {min(cpus):.1f})")
            print(f"  CPU rounds: {' '.join(f'{c:.1f}' for c in cpus)}")
            if args.stages:
                for name, us in stages(broker, frames, args.partitions).items():
                    print(f"  stage {name:40s} {us:7.1f} us/request")
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                run_round(broker, conn, frames)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        finally:
            broker.stop_requested.set()
            shutdown = getattr(broker, "shutdown", None)
            if shutdown is not None:
                await shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--partitions-per-request", type=int, default=1)
    ap.add_argument("--batch-kib", type=int, default=64)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--version", type=int, default=9, help="the Produce version of the frames (3-13)")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--override", action="append", default=[], help="broker property key=value")
    args = ap.parse_args()
    try:
        import uvloop  # the broker's default loop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
