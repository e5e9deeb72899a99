"""Runs fuzz cases against a broker subprocess and watches it: crashes, ERROR tracebacks, memory,
file descriptors, and a real client's service between bursts.

A burst sends ``burst`` cases over up to ``conns`` concurrent connections, one case per connection
(a malformed request rightly closes its connection, so sharing one would hide the cases after
it). After each case's frame the harness sends an ApiVersions v0 "barrier" request: its answer
proves the broker processed the case (responses come in request order); a close proves it rejected
it; neither within ``case_timeout`` means the case is waiting (a long Fetch, a JoinGroup), and the
connection is closed. A "framing" case (frame size off by a few bytes) is followed by zeros instead,
which the broker reads as a zero-size frame and closes on. Each answer is decoded with the response
schema of the request's version. After the burst:

* the broker must be alive (else: restart it, replay the burst's cases one at a time to name the one
  that kills it);
* its log must have no new ERROR/CRITICAL line or traceback (else: replay one at a time to name the
  case);
* no answer may have failed to decode (a response its own schema cannot read breaks clients);
* RSS must stay under ``rss_limit_mb`` (400 MB; the broker is killed past ``rss_kill_mb`` before the
  OOM killer picks a process) and the open fds, once our connections are gone, under the start-up
  count + FDS_PER_PARTITION per partition created since + ``fd_slack`` (64);
* a real client (confluent-kafka) must produce one record and read it back, and fetch Metadata,
  within ``probe_limit_s`` (5 s).

Each finding names (seed, case) so ``python -m tests.fuzz --seed S --case N`` replays it alone.
Cases matching an entry of :data:`KNOWN_FINDINGS` (defects other branches fix) are not sent unless
``include_known``.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.broker.api.handlers import all_handlers
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.primitives import DecodeError
from tests.fuzz.generate import request_name
from tests.fuzz.mutate import BARRIER, BARRIER_CORR, FRAMING_PAD, Case, build_case
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient, create_topic

PROBE_TOPIC = "fuzz-probe"
FDS_PER_PARTITION = 2  # its log segment (indexes hold no fd), + a rolled segment's while it rolls


@dataclass(frozen=True)
class KnownFinding:
    """A finding in another branch's area, kept out of the CI run until that branch is merged."""

    name: str
    defect: str  # the Odradek issue 17 defect it belongs to
    example: str  # a (seed, case) that shows it
    matches: Callable[[Case], bool]


# A finding whose fix is not merged yet goes here (name, the defect it belongs to, a (seed, case) that
# shows it, and a matcher), so the CI run stays green meanwhile; the list is empty when everything
# found is fixed. The four findings of issue 17's first runs (CreateTopics and CreatePartitions
# with huge partition counts, Metadata v10/v11 with a null topic name, records malformed inside a
# valid CRC) were fixed and their cases are sent again.
KNOWN_FINDINGS: list[KnownFinding] = []


def _version_sent(case: Case) -> tuple[int, int]:
    """(api key, version) as they are in the frame (a mutation may have changed the generated ones)."""
    if len(case.frame) < 8:
        return -1, -1
    return struct.unpack_from(">hh", case.frame, 4)


def known_finding(case: Case) -> KnownFinding | None:
    for known in KNOWN_FINDINGS:
        try:
            if known.matches(case):
                return known
        except (KeyError, TypeError, AttributeError):
            continue
    return None


@dataclass
class Finding:
    kind: str  # crash, error-log, bad-response, rss, fds, probe
    detail: str
    cases: list[Case] = field(default_factory=list)
    burst: tuple[int, int, int] | None = None  # (seed, first case, last case)

    def describe(self) -> str:
        where = "; ".join(c.describe() for c in self.cases[:3])
        if not where and self.burst:
            where = f"seed={self.burst[0]} cases {self.burst[1]}..{self.burst[2]}"
        return f"[{self.kind}] {self.detail} <- {where}"


def served_apis() -> dict[int, tuple[int, int]]:
    """What the broker serves: the handler registry's api keys and version ranges."""
    return {key: (spec.min_version, spec.max_version) for key, spec in all_handlers().items()}


class Probe:
    """A real client (confluent-kafka): produce one record, read it back, and fetch Metadata."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, Producer

        common = {"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 10000}
        self.producer = Producer({**common, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
                                  "message.timeout.ms": 20000})
        self.consumer = Consumer({**common, "group.id": "fuzz-probe-group", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 50})
        self.sent = 0

    def check(self, timeout: float) -> float:
        """Seconds the round trip took; raises AssertionError when it fails or exceeds ``timeout``."""
        from confluent_kafka import TopicPartition

        start = time.monotonic()
        deadline = start + timeout
        self.sent += 1
        value = f"probe-{self.sent}-{uuid.uuid4()}".encode()
        delivered: list = []
        self.producer.produce(PROBE_TOPIC, value, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg)))
        while not delivered and time.monotonic() < deadline:
            self.producer.poll(0.05)
        assert delivered, f"produce not acknowledged within {timeout}s"
        err, msg = delivered[0]
        assert err is None, f"produce failed: {err}"
        self.consumer.assign([TopicPartition(PROBE_TOPIC, 0, msg.offset())])
        while time.monotonic() < deadline:
            got = self.consumer.poll(0.1)
            if got is None or got.error():
                continue
            if got.value() == value:
                break
        else:
            raise AssertionError(f"record at offset {msg.offset()} not read back within {timeout}s")
        md = self.producer.list_topics(timeout=max(0.1, deadline - time.monotonic()))
        assert PROBE_TOPIC in md.topics, "metadata lacks the probe topic"
        took = time.monotonic() - start
        assert took <= timeout, f"probe took {took:.1f}s > {timeout}s"
        return took

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(1)


class Harness:
    def __init__(self, data_dir: Path | None = None, conns: int = 8, burst: int = 200, case_timeout: float = 1.0,
                 rss_limit_mb: float = 400.0, fd_slack: int = 64, probe_limit_s: float = 5.0,
                 include_known: bool = False, log: Callable[[str], None] = print) -> None:
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="odradek-fuzz-")
            data_dir = Path(self._tmp.name)
        self.broker = BrokerProcess(data_dir)
        self.conns = conns
        self.burst = burst
        self.case_timeout = case_timeout
        self.rss_limit_mb = rss_limit_mb
        self.rss_kill_mb = max(1000.0, 2 * rss_limit_mb)
        self.fd_slack = fd_slack
        self.probe_limit_s = probe_limit_s
        self.include_known = include_known
        self.log = log
        self.apis = served_apis()
        self.findings: list[Finding] = []
        self.sent = 0
        self.skipped_known = 0
        self.outcomes: dict[str, int] = {"answered": 0, "closed": 0, "waiting": 0}
        self.closed_decodable: dict[tuple[int, int], list] = {}
        self.waiting: dict[tuple[int, str], list] = {}
        self.log_pos = 0
        self.probe: Probe | None = None
        self.baseline_fds = 0
        self.baseline_partitions = 0
        self.peak_rss_mb = 0.0
        self.probe_max_s = 0.0

    # -- broker --------------------------------------------------------------------------------

    def start(self) -> None:
        self.broker.start()
        with WireClient(self.broker.host, self.broker.port) as c:
            create_topic(c, PROBE_TOPIC, 1)
        self.probe = Probe(self.broker.bootstrap)
        self.probe.check(30.0)  # warm-up: connections, metadata
        self.baseline_fds = self.fd_count()
        self.baseline_partitions = self.partition_dirs()
        self.log_pos = self._log_size()

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.close()
        self.broker.kill()
        if self._tmp is not None:
            self._tmp.cleanup()

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.broker.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def fd_count(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.broker.proc.pid}/fd"))
        except OSError:
            return 0

    def partition_dirs(self) -> int:
        """Partitions on disk: each legitimately holds a few fds open (segment, indexes)."""
        try:
            return sum(1 for e in os.scandir(self.broker.data_dir / "logs") if e.is_dir())
        except OSError:
            return 0

    def fd_bound(self) -> int:
        # The fds of the start-up state, plus FDS_PER_PARTITION for every partition created since
        # (topics the fuzz cases auto-create or create), plus ``fd_slack``: our connections are all
        # closed by now, so anything past that is a leak.
        return self.baseline_fds + FDS_PER_PARTITION * (self.partition_dirs() - self.baseline_partitions) + self.fd_slack

    def _log_size(self) -> int:
        try:
            return self.broker.log_path.stat().st_size
        except OSError:
            return 0

    def new_error_lines(self) -> list[str]:
        """ERROR/CRITICAL lines and tracebacks logged since the last call."""
        with open(self.broker.log_path, "rb") as f:
            f.seek(self.log_pos)
            data = f.read()
        self.log_pos += len(data)
        lines = data.decode(errors="replace").splitlines()
        return [ln for ln in lines if "] ERROR " in ln or "] CRITICAL " in ln or ln.startswith("Traceback")]

    # -- sending -------------------------------------------------------------------------------

    def send(self, cases: list[Case], conns: int) -> None:
        """Send each case on its own connection, ``conns`` at a time, then wait for its barrier."""
        sel = selectors.DefaultSelector()
        pending = list(reversed(cases))
        live: dict[socket.socket, list] = {}
        while pending or live:
            while pending and len(live) < conns:
                case = pending.pop()
                try:
                    s = socket.create_connection((self.broker.host, self.broker.port), timeout=2.0)
                    s.sendall(case.frame + (FRAMING_PAD if case.mutation == "framing" else BARRIER))
                except OSError:
                    # The broker closed mid-send (it may rightly stop reading a bad frame).
                    self.outcomes["closed"] += 1
                    continue
                s.setblocking(False)
                live[s] = [bytearray(), time.monotonic() + self.case_timeout, case]
                sel.register(s, selectors.EVENT_READ)
                self.sent += 1
            rss = self.rss_mb()
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            if rss > self.rss_kill_mb:
                # Stop it before the OOM killer picks a process on a shared box.
                self.log(f"broker RSS {rss:.0f} MB > {self.rss_kill_mb:.0f} MB: killing it")
                self.broker.proc.kill()
            for key, _ in sel.select(0.05):
                s = key.fileobj
                buf = live[s][0]
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._done(sel, live, s, "closed")
                    continue
                buf += data
                if _has_barrier(buf):
                    self._check_response(live[s][2], buf)
                    self._done(sel, live, s, "answered")
            now = time.monotonic()
            for s in [s for s, (_, deadline, _) in live.items() if now > deadline]:
                self._done(sel, live, s, "waiting")
        sel.close()

    def _check_response(self, case: Case, buf: bytearray) -> None:
        """The case's response (the frame before the barrier's) must decode with its own schema: a
        response the broker's codec cannot read back would break a client."""
        if case.decoded is None or len(buf) < 8:
            return
        size, corr = struct.unpack_from(">ii", buf, 0)
        if corr == BARRIER_CORR:
            return  # no response (Produce acks=0)
        frame = memoryview(buf)[4: 4 + size]
        # The api key and version as sent: a mutation may have changed the generated ones.
        api_key, version = struct.unpack_from(">hh", case.frame, 4)
        name = request_name(api_key)[: -len("Request")] + "Response"
        pos = 4 + (1 if api_key != 18 and is_flexible(name, version) else 0)
        try:
            _, end = codec(name, version).decode(frame, pos)
            problem = None if end == len(frame) else f"{len(frame) - end} bytes after the body"
        except DecodeError as exc:
            problem = str(exc)
        if problem is not None:
            finding = Finding("bad-response", f"{name} v{version} does not decode: {problem}", [case])
            self.log(f"FINDING {finding.describe()}")
            self.findings.append(finding)

    def _done(self, sel: selectors.BaseSelector, live: dict, s: socket.socket, outcome: str) -> None:
        sel.unregister(s)
        s.close()
        case = live.pop(s)[2]
        self.outcomes[outcome] += 1
        if outcome == "waiting":
            key = (case.api_key, case.mutation)
            self.waiting.setdefault(key, [0, case])[0] += 1
        if (outcome == "closed" and case.decoded is not None and case.mutation != "framing"
                and not (_version_sent(case)[0] == 0 and case.decoded["acks"] == 0)):
            # Not a finding by itself (Kafka closes on some errors, as on any failed Produce with
            # acks=0, left out here), but listed at the end of a run for a look.
            key = _version_sent(case)
            self.closed_decodable.setdefault(key, [0, case])[0] += 1

    # -- checking ------------------------------------------------------------------------------

    def run_burst(self, cases: list[Case]) -> list[Finding]:
        if not cases:
            return []
        span = (cases[0].seed, cases[0].index, cases[-1].index)
        self.send(cases, self.conns)
        found: list[Finding] = []
        time.sleep(0.05)  # let the last closes and their log lines land
        if not self.broker.alive():
            found.append(Finding("crash", f"broker exited with {self.broker.proc.returncode}", burst=span))
            self.broker.kill()
            self.broker.start()
            self.log_pos = self._log_size()
            found[-1].cases = self.attribute(cases, lambda: not self.broker.alive())
        errors = self.new_error_lines()
        if errors:
            culprits = self.attribute(cases, lambda: bool(self.new_error_lines()))
            found.append(Finding("error-log", " | ".join(errors[:3]), culprits, span))
        rss = self.rss_mb()
        if rss > self.rss_limit_mb:
            found.append(Finding("rss", f"RSS {rss:.0f} MB > {self.rss_limit_mb:.0f} MB", burst=span))
        fds = self._settled_fds()
        if fds > self.fd_bound():
            found.append(Finding("fds", f"{fds} fds open > bound {self.fd_bound()} (start-up {self.baseline_fds}, "
                                 f"{self.partition_dirs()} partitions)", burst=span))
        try:
            assert self.probe is not None
            self.probe_max_s = max(self.probe_max_s, self.probe.check(self.probe_limit_s))
        except AssertionError as exc:
            found.append(Finding("probe", f"real client: {exc}", burst=span))
        for f in found:
            self.log(f"FINDING {f.describe()}")
        self.findings += found
        return found

    def _settled_fds(self) -> int:
        deadline = time.monotonic() + 2.0
        fds = self.fd_count()
        while fds > self.fd_bound() and time.monotonic() < deadline:
            time.sleep(0.1)
            fds = self.fd_count()
        return fds

    def attribute(self, cases: list[Case], bad: Callable[[], bool]) -> list[Case]:
        """Replay ``cases`` one at a time; the ones after which ``bad()`` holds are the culprits."""
        culprits = []
        for case in cases:
            self.send([case], 1)
            time.sleep(0.02)
            if bad():
                culprits.append(case)
                if not self.broker.alive():
                    self.broker.kill()
                    self.broker.start()
                    self.log_pos = self._log_size()
        return culprits

    def cases(self, seed: int, indexes: Iterable[int]) -> Iterable[Case]:
        for i in indexes:
            case = build_case(seed, i, self.apis)
            if not self.include_known and known_finding(case) is not None:
                self.skipped_known += 1
                continue
            yield case

    def run(self, seed: int, indexes: Iterable[int], until: float | None = None) -> None:
        """Run the cases of ``seed`` at ``indexes`` in bursts (stop early at monotonic ``until``)."""
        batch: list[Case] = []
        for case in self.cases(seed, indexes):
            batch.append(case)
            if len(batch) == self.burst:
                self.run_burst(batch)
                batch = []
                if until is not None and time.monotonic() > until:
                    return
        self.run_burst(batch)


def _has_barrier(buf: bytearray) -> bool:
    pos = 0
    while len(buf) - pos >= 8:
        size, corr = struct.unpack_from(">ii", buf, pos)
        if corr == BARRIER_CORR:
            return True
        if size < 4:
            return False
        pos += 4 + size
    return False
