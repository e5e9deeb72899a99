"""protocol/messages.py, the generated TypedDicts: current with their generator, and with exactly the
keys the codec reads and writes at every version of every request and response."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import messages
from odradek.protocol.codec import codec
from odradek.protocol.schema_data import MESSAGES

ROOT = Path(__file__).resolve().parents[2]
KAFKA_DEFINITIONS = ROOT / ".cache/jars/kafka/kafka-clients-4.4.0.jar"

BODIES = sorted(name for name, spec in MESSAGES.items() if spec["type"] in ("request", "response"))


def test_the_committed_module_is_what_the_generator_makes() -> None:
    if not KAFKA_DEFINITIONS.exists():
        pytest.skip(f"{KAFKA_DEFINITIONS} (the struct names' source) is missing: run `make kafka-tools`")
    from tools.gen_messages import generate

    committed = (ROOT / "protocol/messages.py").read_text()
    assert generate(KAFKA_DEFINITIONS) == committed, (
        "protocol/messages.py is stale: python tools/gen_messages.py > protocol/messages.py")


def test_every_request_and_response_has_its_typed_dict() -> None:
    missing = [name for name in BODIES if not typing.is_typeddict(getattr(messages, name, None))]
    assert missing == []


def _one_of_everything(fields: list) -> dict[str, Any]:
    """A body with one element in every struct array and every struct filled, at any depth, so the
    decoder builds every nested struct (the encoder writes defaults for the rest)."""
    body: dict[str, Any] = {}
    for name, kind, *_, children in fields:
        if kind == "[]struct":
            body[name] = [_one_of_everything(children)]
        elif kind == "struct":
            body[name] = _one_of_everything(children)
    return body


def _struct_of(hint: Any) -> Any:
    """The TypedDict in ``X``, ``X | None``, ``list[X]`` or ``list[X] | None``; None for a scalar."""
    if typing.is_typeddict(hint):
        return hint
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        found = [s for s in (_struct_of(arg) for arg in typing.get_args(hint)) if s is not None]
        return found[0] if found else None
    if typing.get_origin(hint) is list:
        return _struct_of(typing.get_args(hint)[0])
    return None


def _key_differences(value: dict[str, Any], typed: Any, where: str) -> list[str]:
    """Where the decoded ``value`` does not fit ``typed``, nested structs included: a key it has that
    is not typed, or a required key it lacks."""
    keys = typed.__required_keys__ | typed.__optional_keys__
    found = []
    if not set(value) <= keys:
        found.append(f"{where}: decoded {sorted(set(value) - keys)}, not typed")
    if not typed.__required_keys__ <= set(value):
        found.append(f"{where}: required {sorted(typed.__required_keys__ - set(value))}, not decoded")
    hints = typing.get_type_hints(typed)
    for key in sorted(keys & set(value)):
        inner = _struct_of(hints[key])
        item = value[key]
        if inner is None or item is None:
            continue
        for element in item if isinstance(item, list) else [item]:
            found += _key_differences(element, inner, f"{where}.{key}")
    return found


@pytest.mark.parametrize("name", BODIES)
def test_typed_keys_are_the_decoded_keys_at_every_version(name: str) -> None:
    # Every key a decoder gives is typed, and every required key is given, at every version (the
    # generated decoders fill the default of each field a version lacks; Produce's native one gives
    # only the keys of the version's topic naming, name or topic_id, both NotRequired).
    spec = MESSAGES[name]
    typed = getattr(messages, name)
    body = _one_of_everything(spec["fields"])
    differences = []
    for version in range(spec["valid"][0], spec["valid"][1] + 1):
        c = codec(name, version)
        decoded, _ = c.decode(c.encode(body))
        differences += _key_differences(decoded, typed, f"{name} v{version}")
    assert differences == []


def test_a_required_field_is_one_every_version_has() -> None:
    # ProduceRequest's acks is in every version; Produce v13's topic_id only from v13, so a client
    # building an older request leaves it out (Kafka's ProduceRequest.json).
    assert "acks" in messages.ProduceRequest.__required_keys__
    assert "topic_id" in messages.TopicProduceData.__optional_keys__
    assert "name" in messages.TopicProduceData.__optional_keys__  # v0-12 only
    # A tagged field (KIP-951's current_leader, v10+) is optional even in the versions that have it.
    assert "current_leader" in messages.PartitionProduceResponse.__optional_keys__
    assert "throttle_time_ms" in messages.ProduceResponse.__required_keys__


def test_the_broker_and_every_handler_run_without_the_types_module() -> None:
    # The TypedDicts cost nothing at run time only if nothing imports them then (building their
    # classes takes tens of milliseconds): every import of protocol/messages.py sits under
    # TYPE_CHECKING. A fresh interpreter loads the broker and every registered handler.
    probe = ("import sys\n"
             "import odradek.broker.server\n"
             "from odradek.broker.api.handlers import all_handlers\n"
             "assert len(all_handlers()) > 50\n"
             "print(sorted(m for m in sys.modules if m.endswith('protocol.messages')))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_mypy_refuses_a_misspelt_or_missing_response_key(tmp_path: Path) -> None:
    # What the types are for: the codec writes m.get(name, default), so before them a misspelt key
    # silently sent the default.
    source = tmp_path / "probe.py"
    source.write_text(textwrap.dedent("""
        from odradek.protocol.messages import PartitionProduceResponse

        def answer() -> PartitionProduceResponse:
            return {"index": 0, "error_code": 0, "base_offset": 5, "log_apend_time_ms": -1}
    """))
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"),
                             str(source)], cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"log_apend_time_ms"' in result.stdout  # the misspelt key
    assert '"log_append_time_ms"' in result.stdout  # the one left out
