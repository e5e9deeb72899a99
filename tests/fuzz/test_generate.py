"""The fuzzer's own checks, no broker: its span map matches the broker's codec, cases are reproducible."""

from __future__ import annotations

import random

from odradek.protocol.codec import codec
from tests.fuzz.generate import codec_bytes, generate
from tests.fuzz.harness import served_apis
from tests.fuzz.mutate import MUTATIONS, build_case, sweep_indexes


def test_generated_requests_match_the_codec_byte_for_byte() -> None:
    for api_key, (lo, hi) in served_apis().items():
        for version in range(lo, hi + 1):
            for n in range(5):
                enc = generate(random.Random(f"{api_key}:{version}:{n}"), api_key, version)
                assert enc.body == codec_bytes(enc), (enc.name, version, enc.value)
                value, end = codec(enc.name, version).decode(enc.body)
                assert end == len(enc.body)
                for span in enc.spans:
                    assert 0 <= span.pos and span.pos + span.size <= len(enc.body)


def test_a_case_is_rebuilt_exactly_from_its_seed_and_index() -> None:
    apis = served_apis()
    seen = set()
    for index in (0, 7, 123, 4567):
        a, b = build_case(3, index, apis), build_case(3, index, apis)
        assert (a.frame, a.describe()) == (b.frame, b.describe())
        seen.add(a.mutation)
    assert seen <= set(MUTATIONS)
    sweep = sweep_indexes(3, apis)
    assert len(sweep) > 1000
    case = build_case(3, sweep[10], apis)
    assert case.mutation == "truncate" and case.decoded is None
