"""The long fuzz run: ``python -m tests.fuzz --minutes 30`` (``make fuzz FUZZ_MINUTES=30``).

Runs seeds ``--seed``, ``--seed``+1, ... (``--cases`` cases each) until the time is up, then prints
the number of inputs sent and every finding with its (seed, case). ``--seed S --case N`` replays one
case alone (``--after K``: after cases K..N-1, for findings that need earlier state) and prints what
it is and what the broker did with it. Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.fuzz.harness import Harness, known_finding
from tests.fuzz.mutate import build_case


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=20_000, help="cases per seed before moving to the next seed")
    ap.add_argument("--case", type=int, help="replay this one case of --seed")
    ap.add_argument("--after", type=int, help="with --case: first run the cases --after..case-1 of --seed in "
                    "bursts, for findings that need the state earlier cases left (a stored batch, a group)")
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--burst", type=int, default=300)
    ap.add_argument("--include-known", action="store_true", help="also send the cases of KNOWN_FINDINGS")
    args = ap.parse_args(argv)

    h = Harness(conns=args.conns, burst=args.burst, include_known=args.include_known or args.case is not None)
    h.start()
    started = time.monotonic()
    try:
        if args.case is not None:
            if args.after is not None:
                h.include_known = False
                h.run(args.seed, range(args.after, args.case))
                h.include_known = True
            case = build_case(args.seed, args.case, h.apis)
            print(case.describe())
            print(f"value: {case.value}")
            print(f"decoded by the broker's codec: {case.decoded}")
            print(f"frame: {case.frame.hex()}")
            known = known_finding(case)
            if known is not None:
                print(f"known finding: {known.name} [{known.defect}]")
            h.run_burst([case])
            print(f"outcome: {h.outcomes}")
        else:
            until = started + args.minutes * 60
            seed = args.seed
            while time.monotonic() < until:
                h.run(seed, range(args.cases), until=until)
                print(f"seed {seed}: {h.sent} inputs sent so far, {len(h.findings)} findings", flush=True)
                seed += 1
    finally:
        h.stop()
    elapsed = time.monotonic() - started
    print(f"\n{h.sent} inputs sent in {elapsed:.0f}s ({h.skipped_known} known-finding cases skipped); "
          f"outcomes {h.outcomes}; peak RSS {h.peak_rss_mb:.0f} MB; slowest probe {h.probe_max_s:.2f}s")
    for (api, version), (n, case) in sorted(h.closed_decodable.items()):
        print(f"  note: {n} decodable api={api} v{version} requests closed, e.g. {case.describe()}")
    for (api, mutation), (n, case) in sorted(h.waiting.items()):
        print(f"  note: {n} api={api} {mutation} cases still waiting after {h.case_timeout}s, e.g. {case.describe()}")
    print(f"{len(h.findings)} findings")
    for f in h.findings:
        print(" ", f.describe())
    return 1 if h.findings else 0


if __name__ == "__main__":
    sys.exit(main())
