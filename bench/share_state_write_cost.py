"""What one acknowledgement's share-state write costs the share coordinator (issue 30): thread CPU
per write of a share-partition's state with ``--batches`` in-flight batches, through
``ShareStateStore.write`` and the coordinator runtime (the record's encoding, the batch, the apply)
to an in-memory partition writer that is durable at once - no broker, no disk, no network.

    python bench/share_state_write_cost.py [--batches 1000] [--acks 1000] [--rounds 5]
                                           [--baseline DIR]

The share-partition's state is ``--batches`` one-record batches, Available, delivery counts 1 and
2 in turn (so that no two merge into one range); each acknowledgement accepts the next batch
(state 2) and writes the whole state, as the share-partition manager does. Before each round the
store holds the state with nothing acknowledged. The caller's construction of the state is outside
the measurement. ``--baseline DIR``: another checkout (``git archive`` of the commit measured
against), measured in its own process, alternated with this one each round. Prints microseconds of
thread CPU per write (each round's, and the medians) and the bytes appended per write.

Who may call it: the command line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r"""
import asyncio, json, sys, time, types, uuid
sys.path.insert(0, sys.argv[1])
from odradek.broker.share.share_state_records import ShareState
from odradek.broker.share.share_state_store import STATE_TOPIC, ShareStateStore

BATCHES, ACKS = int(sys.argv[2]), int(sys.argv[3])


class Writer:
    # A PartitionWriter whose appends are durable at once (one node, memory only).
    def __init__(self):
        self.end = 0
        self.bytes = 0
    def append(self, topic, partition, records):
        f = asyncio.get_running_loop().create_future()
        self.end += 1
        self.bytes += len(records)
        f.set_result(self.end - 1)
        return f
    def read(self, topic, partition, offset, max_bytes):
        return b""
    def log_start_offset(self, topic, partition):
        return 0
    def log_end_offset(self, topic, partition):
        return 0
    def on_become_leader(self, callback):
        pass
    def on_resign(self, callback):
        pass
    def wait_for_high_watermark(self, topic, partition, offset):
        f = asyncio.get_running_loop().create_future()
        f.set_result(offset)
        return f
    async def delete_records(self, topic, partition, offset):
        return offset


async def main():
    part = types.SimpleNamespace(partition=0, leader=1, leader_epoch=0)
    topic = types.SimpleNamespace(partitions={0: part}, topic_id=uuid.uuid4())
    image = types.SimpleNamespace(topics={STATE_TOPIC: topic}, partition=lambda t, p: part,
                                  live_broker_ids=lambda: [1])
    writer = Writer()
    store = ShareStateStore(writer, types.SimpleNamespace(image=image), None, 1, 1, 1, 1, 1 << 20, True)
    await store.start()
    while store.runtime.state(0) is None or store.runtime.state(0).value != "active":
        await asyncio.sleep(0.001)
    key = ("g", uuid.UUID(int=7), 0)
    window = [(i, i, 0, 1 + i % 2) for i in range(BATCHES)]
    store.write(key, ShareState(0, batches=list(window)))
    states = []
    for n in range(ACKS):
        window[n % BATCHES] = (n % BATCHES, n % BATCHES, 2, 1 + n % 2)
        states.append(ShareState(0, leader_epoch=0, batches=list(window)))
    before = writer.bytes
    t0 = time.thread_time()
    for s in states:
        assert store.write(key, s)
    cpu = time.thread_time() - t0
    appended = writer.bytes - before
    assert store.read(key).batches == states[-1].batches
    store.shutdown()
    print(json.dumps({"us_per_write": cpu / ACKS * 1e6, "bytes_per_write": appended / ACKS}))


asyncio.run(main())
"""


def measure(repo: Path, batches: int, acks: int) -> tuple[float, float]:
    """(microseconds of thread CPU, bytes appended) per write."""
    out = subprocess.run([sys.executable, "-c", WORKER, str(repo), str(batches), str(acks)],
                         check=True, capture_output=True, text=True, cwd=repo).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return float(got["us_per_write"]), float(got["bytes_per_write"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--acks", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", type=Path)
    args = ap.parse_args()
    targets = {"odradek": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
    for r in range(args.rounds):
        order = list(targets.items()) if r % 2 == 0 else list(reversed(targets.items()))
        for name, repo in order:
            results[name].append(measure(repo, args.batches, args.acks))
        print(f"round {r + 1}: " + ", ".join(f"{n} {results[n][-1][0]:.1f} us" for n in targets), flush=True)
    for name, values in results.items():
        print(f"{name}: median {statistics.median(v[0] for v in values):.1f} us thread CPU and "
              f"{statistics.median(v[1] for v in values):,.0f} bytes appended per write "
              f"({args.batches} in-flight batches, {args.acks} writes per round, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
