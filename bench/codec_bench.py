"""Microbenchmark: request decode and response encode per hot API, in-process, no sockets.

What it times (microseconds per call, best of --rounds rounds of timeit, as the dispatcher does it:
``codec(schema, version).decode`` on a memoryview after the header, and
``odradek.broker.api.dispatcher.encode_response`` for responses, which includes the size prefix, the response
header and splitting around sendfile regions):

    Produce v9 request, 1 and 8 partitions of one 64 KiB batch each (record bytes stay opaque)
    Produce v9 response, 1 and 8 partitions
    Fetch v12 request, 1 and 8 partitions; Fetch v12 response, 8 partitions with file regions
    Metadata v12 request (all topics) and response for 1 topic x 10,000 partitions
    ApiVersions v3 request and response

    python bench/codec_bench.py [--rounds 5]

Who may call it: the command line; single-threaded.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odradek.broker.api.dispatcher import encode_response  # noqa: E402
from odradek.protocol.codec import codec  # noqa: E402
from odradek.storage.results import FetchSlice  # noqa: E402

BATCH = bytes(65536)


def produce_request(partitions: int) -> dict:
    return {"acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": "bench", "partition_data": [{"index": p, "records": BATCH} for p in range(partitions)]}]}


def produce_response(partitions: int) -> dict:
    return {"responses": [{"name": "bench", "partition_responses": [
        {"index": p, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None} for p in range(partitions)]}], "throttle_time_ms": 0}


def fetch_request(partitions: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": "bench", "partitions": [
                {"partition": p, "current_leader_epoch": 0, "fetch_offset": 1000, "log_start_offset": -1,
                 "partition_max_bytes": 1048576} for p in range(partitions)]}]}


def fetch_response(partitions: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "bench", "partitions": [
        {"partition_index": p, "error_code": 0, "high_watermark": 5000, "last_stable_offset": 5000,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": FetchSlice(None, 4096 * p, 1048576)} for p in range(partitions)]}]}


def metadata_response(partitions: int) -> dict:
    return {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
            "cluster_id": "abc", "controller_id": 1, "topics": [
                {"error_code": 0, "name": "bench", "is_internal": False, "partitions": [
                    {"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                     "isr_nodes": [1], "offline_replicas": []} for p in range(partitions)]}]}


def api_versions_response() -> dict:
    return {"error_code": 0, "api_keys": [{"api_key": k, "min_version": 0, "max_version": 9} for k in range(60)],
            "throttle_time_ms": 0}


def cases() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []

    def dec(label: str, schema: str, version: int, body: dict) -> None:
        c = codec(schema, version)
        view = memoryview(c.encode(body))
        out.append((label, lambda: c.decode(view, 0)))

    def enc(label: str, schema: str, version: int, body: dict, flexible: bool) -> None:
        out.append((label, lambda: encode_response(schema, version, 42, body, flexible)))

    for n in (1, 8):
        dec(f"Produce v9 request decode, {n} x 64 KiB", "ProduceRequest", 9, produce_request(n))
        enc(f"Produce v9 response encode, {n} partitions", "ProduceResponse", 9, produce_response(n), True)
        dec(f"Fetch v12 request decode, {n} partitions", "FetchRequest", 12, fetch_request(n))
    enc("Fetch v12 response encode, 8 file regions", "FetchResponse", 12, fetch_response(8), True)
    dec("Metadata v12 request decode, all topics", "MetadataRequest", 12, {"topics": None,
                                                                          "allow_auto_topic_creation": False})
    enc("Metadata v12 response encode, 10,000 partitions", "MetadataResponse", 12, metadata_response(10_000), True)
    dec("ApiVersions v3 request decode", "ApiVersionsRequest", 3, {"client_software_name": "apache-kafka-java",
                                                                   "client_software_version": "3.9.1"})
    enc("ApiVersions v3 response encode, 60 apis", "ApiVersionsResponse", 3, api_versions_response(), False)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    print("| operation | us per call (best of rounds) | calls per second |")
    print("|---|---:|---:|")
    for label, fn in cases():
        timer = timeit.Timer(fn)
        number, _ = timer.autorange()
        best = min(timer.repeat(repeat=args.rounds, number=number)) / number
        print(f"| {label} | {best * 1e6:,.1f} | {1 / best:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
