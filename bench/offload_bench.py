"""Does moving CRC32C + the file write to a pool thread, a burst at a time, buy a second core here?

Issue 18, item 4. The handler loop's work per Produce is some Python (decode, handler, encode: it
holds the GIL) plus the CRC32C of the batch and its ``pwrite`` (both release the GIL). This models a
drain of the request queue that finds ``--burst`` requests: either

- inline: per request, the Python work, then CRC and pwrite on the handler thread (today), or
- batched: one hand-off per burst to a pool thread that CRCs and writes every batch of the burst
  while the handler thread does the Python work of all of them; the handler waits for the pool
  at the end of the burst (a real design would then answer the burst's requests).

The Python work is real protocol work of the same size as the broker's (decoding the Produce
request and encoding its response with the project's codecs, repeated ``--python-reps`` times).
Reported per request: wall and process CPU microseconds, medians of alternated rounds. Real
parallelism shows as wall per request below inline's with CPU per request about equal.

    python bench/offload_bench.py [--burst 1,4,16] [--rounds 7] [--batch-kib 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.produce_path_bench import make_batch, produce_frame  # noqa: E402
from odradek.broker.api.dispatcher import encode_response  # noqa: E402
from odradek.protocol.checksum import crc32c  # noqa: E402
from odradek.protocol.codec import codec  # noqa: E402
from odradek.protocol.headers import decode_request_header  # noqa: E402

CRC_START = 21


def python_work(frame: bytes, reps: int) -> None:
    request = codec("ProduceRequest", 9)
    for _ in range(reps):
        header = decode_request_header(memoryview(frame), True)
        body, _ = request.decode(memoryview(frame), header.body_offset)
        response = {"responses": [{"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": 0, "base_offset": 1, "log_append_time_ms": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None} for p in t["partition_data"]]} for t in body["topic_data"]],
            "throttle_time_ms": 0}
        encode_response("ProduceResponse", 9, 1, response, True)


def crc_and_write(fd: int, batches: list[memoryview], at: int) -> int:
    for b in batches:
        if crc32c(b[CRC_START:]) != int.from_bytes(b[17:21], "big"):
            raise ValueError("bad CRC")
        at += os.pwrite(fd, b, at)
    return at


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", default="1,4,16")
    ap.add_argument("--bursts", type=int, default=200, help="bursts per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch-kib", type=int, default=64)
    ap.add_argument("--python-reps", type=int, default=3, help="decode+encode repetitions per request (~15 us each)")
    args = ap.parse_args()
    batch = make_batch(1024, args.batch_kib * 1024)
    frame = produce_frame(1, [0], batch)
    pool = ThreadPoolExecutor(max_workers=1)
    with tempfile.TemporaryDirectory(prefix="odradek-offload-") as tmp:
        fd = os.open(os.path.join(tmp, "log"), os.O_RDWR | os.O_CREAT)
        try:
            for burst in (int(x) for x in args.burst.split(",")):
                views = [memoryview(make_batch(1024, args.batch_kib * 1024)) for _ in range(burst)]
                results: dict[str, list[tuple[float, float]]] = {"inline": [], "batched": []}
                at = 0
                for _ in range(args.rounds):
                    for mode in ("inline", "batched"):
                        os.ftruncate(fd, 0)
                        at = 0
                        t0, c0 = time.perf_counter(), time.process_time()
                        for _ in range(args.bursts):
                            if mode == "inline":
                                for v in views:
                                    python_work(frame, args.python_reps)
                                    at = crc_and_write(fd, [v], at)
                            else:
                                fut = pool.submit(crc_and_write, fd, views, at)
                                for _v in views:
                                    python_work(frame, args.python_reps)
                                at = fut.result()
                        n = args.bursts * burst
                        results[mode].append(((time.perf_counter() - t0) / n * 1e6,
                                              (time.process_time() - c0) / n * 1e6))
                line = [f"burst {burst:3d}:"]
                for mode, rows in results.items():
                    line.append(f"{mode} wall {statistics.median(r[0] for r in rows):6.1f} us, "
                                f"CPU {statistics.median(r[1] for r in rows):6.1f} us per request")
                print("  ".join(line), f"(load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            os.close(fd)
            pool.shutdown()


if __name__ == "__main__":
    main()
