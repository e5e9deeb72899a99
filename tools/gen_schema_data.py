"""Generate protocol/schema_data.py from Kafka's message definitions.

Usage: python tools/gen_schema_data.py <kafka>/clients/src/main/resources/common/message \
           [--newer <definitions> Api1,Api2,...] > protocol/schema_data.py
       python tools/gen_schema_data.py --data <kafka>/group-coordinator/src/main/resources/common/message \
           > protocol/coordinator_schema_data.py

protocol/schema_data.py is generated from two sets of definitions: the base set, apache/kafka's
trunk at 1eb7644349c (October 2024, before 4.0), and, for the APIs named after ``--newer``, Kafka
4.4.0's (``common/message/*.json`` inside kafka-clients-4.4.0.jar, which ``make kafka-tools`` puts
in .cache/jars/kafka; a definitions argument may be a directory or such a jar). The newer set is
taken per API, request and response together, as each handler moves to Kafka 4.4's versions:
4.4's definitions drop the versions Kafka 4.0 retired (KIP-896), and for an API whose handler
still serves one of those the base definition must stay until it stops. The command that
regenerates today's file is NEWER_APIS below.

The second form emits the "data" schemas instead: the key and value records a coordinator writes to
its internal topic (__consumer_offsets: OffsetCommitKey/Value, GroupMetadataKey/Value, the KIP-848
records), in the same table shape, for odradek.protocol.codec.MessageCodec(..., messages=...).

Kafka describes every request, response and header in JSON files (with // comments). We turn them
into compact Python tables once, at development time, so the broker neither parses JSON nor needs
Kafka's sources at run time. protocol/codec.py compiles those tables into per-version encoders and
decoders. The tables are data derived from Kafka's protocol specification, not code.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import zipfile
from pathlib import Path

OPEN = 32767  # "N+" version ranges end here

# The APIs protocol/schema_data.py takes from Kafka 4.4.0's definitions (``--newer``): regenerate with
#   python tools/gen_schema_data.py <kafka@1eb7644349c>/clients/src/main/resources/common/message \
#       --newer .cache/jars/kafka/kafka-clients-4.4.0.jar "$(python -c 'from tools.gen_schema_data
#       import NEWER_APIS; print(",".join(NEWER_APIS))')" > protocol/schema_data.py
NEWER_APIS = (
    "AddPartitionsToTxn", "AlterPartitionReassignments", "AlterReplicaLogDirs", "ApiVersions", "ConsumerGroupDescribe",
    "CreateAcls", "CreateTopics", "DeleteAcls", "DeleteGroups", "DeleteTopics", "DescribeAcls", "DescribeCluster",
    "DescribeConfigs", "DescribeGroups", "DescribeLogDirs", "EndTxn", "Fetch", "ListConfigResources", "ListOffsets",
    "ListTransactions", "Metadata", "OffsetCommit", "OffsetFetch", "OffsetForLeaderEpoch", "Produce",
    "TxnOffsetCommit", "WriteTxnMarkers",
    # Share groups (KIP-932, issue 30): Kafka 4.4 serves them from v1 (v0 was 4.0's early access).
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
    "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
    "InitializeShareGroupState", "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState",
    "ReadShareGroupStateSummary",
    # Streams groups (KIP-1071, issue 30); StreamsGroupTopologyDescriptionUpdate is Kafka 4.4's (KIP-1331).
    "StreamsGroupHeartbeat", "StreamsGroupDescribe", "StreamsGroupTopologyDescriptionUpdate",
)

# The coordinator records protocol/coordinator_schema_data.py takes from Kafka 4.4.0's
# group-coordinator jar (names starting with one of these; Kafka 4.x types them "coordinator-key" and
# "coordinator-value", version 0, the record type in apiKey): regenerate with
#   python tools/gen_schema_data.py --data <kafka@1eb7644349c>/group-coordinator/src/main/resources/common/message \
#       --newer .cache/jars/kafka/kafka-group-coordinator-4.4.0.jar StreamsGroup,ShareGroup > protocol/coordinator_schema_data.py
NEWER_RECORDS = ("StreamsGroup", "ShareGroup")


def strip_comments(text: str) -> str:
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        # Trailing // comments never appear inside strings in these files except in URLs; only
        # cut when the // follows a JSON delimiter.
        m = re.search(r"([,\[\]{}])\s*//.*$", line)
        if m:
            line = line[: m.start(1) + 1]
        out.append(line)
    return "\n".join(out)


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def parse_range(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), OPEN
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def parse_default(ftype: str, raw):
    if raw is None:
        return None
    if isinstance(raw, bool):
        return raw
    text = str(raw)
    if text == "null":
        return None
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 0)
    if ftype == "float64":
        return float(text)
    if ftype == "bool":
        return text == "true"
    return text


def convert_fields(fields: list, structs: dict) -> list:
    rows = []
    for f in fields:
        ftype = f["type"]
        nullable = parse_range(f.get("nullableVersions"))
        tagged = parse_range(f.get("taggedVersions"))
        # A tagged field without "versions" exists in its tagged versions (Kafka's FieldSpec), as
        # TransactionLogValue's previous/next producer ids and client transaction version.
        versions = parse_range(f.get("versions")) if "versions" in f else tagged
        tag = f.get("tag")
        flex_override = f.get("flexibleVersions")
        sub = f.get("fields")
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        if sub is None and elem in structs:
            sub = structs[elem]
        children = convert_fields(sub, structs) if sub is not None else None
        if children is not None:
            kind = "[]struct" if ftype.startswith("[]") else "struct"
        else:
            kind = ftype
        default = parse_default(elem if not ftype.startswith("[]") else "array", f.get("default"))
        rows.append(
            (
                snake(f["name"]),
                kind,
                versions,
                nullable,
                tag,
                tagged,
                default,
                flex_override == "none",
                children,
            )
        )
    return rows


def read_definitions(source: str) -> dict[str, dict]:
    """Kafka's message definitions by message name, from a directory of JSON files or from a jar
    holding them under common/message/ (kafka-clients)."""
    texts: list[str] = []
    if source.endswith(".jar"):
        with zipfile.ZipFile(source) as jar:
            texts = [jar.read(n).decode() for n in sorted(jar.namelist())
                     if n.startswith("common/message/") and n.endswith(".json")]
    else:
        texts = [path.read_text() for path in sorted(Path(source).glob("*.json"))]
    specs = (json.loads(strip_comments(text)) for text in texts)
    return {spec["name"]: spec for spec in specs}


def convert_message(spec: dict) -> dict:
    structs = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
    return {
        "api_key": spec.get("apiKey"),
        # Kafka 4.x names its coordinator records' types "coordinator-key"/"-value"; one kind here.
        "type": "data" if spec["type"].startswith("coordinator-") else spec["type"],
        "valid": parse_range(spec["validVersions"]),
        "flexible": parse_range(spec["flexibleVersions"]),
        "fields": convert_fields(spec["fields"], structs),
    }


def main(msg_dir: str, kinds: tuple[str, ...] = ("request", "response", "header"),
         newer: tuple[str, tuple[str, ...]] | None = None) -> None:
    specs = {name: spec for name, spec in read_definitions(msg_dir).items() if spec.get("type") in kinds}
    if newer is not None and kinds == ("data",):
        for name, spec in read_definitions(newer[0]).items():
            if name.startswith(newer[1]) and spec.get("type") in ("coordinator-key", "coordinator-value"):
                specs[name] = spec
    elif newer is not None:
        newer_specs = read_definitions(newer[0])
        for api in newer[1]:
            for name in (f"{api}Request", f"{api}Response"):
                if name not in newer_specs:
                    raise SystemExit(f"{newer[0]} has no {name}")
                # An API Kafka renamed keeps its key: the base definition under the old name goes
                # (ListClientMetricsResources became ListConfigResources in 4.1, KIP-1142).
                renamed = [old for old, spec in specs.items() if old != name
                           and spec.get("apiKey") == newer_specs[name].get("apiKey")
                           and spec.get("type") == newer_specs[name].get("type")]
                for old in renamed:
                    del specs[old]
                specs[name] = newer_specs[name]
    messages = {name: convert_message(spec) for name, spec in specs.items()}
    what = "coordinator record" if kinds == ("data",) else "message"
    print(f'"""Kafka {what} schemas as compact tables. Generated by tools/gen_schema_data.py; do not edit.')
    print()
    print("One JSON document per message, decoded on first use (see protocol/schema_table.py). Each")
    print("field row: [name, type, versions, nullable_versions, tag, tagged_versions, default,")
    print("no_flexible_encoding, child_fields]. Version ranges are [low, high] or null.")
    if newer is not None and kinds == ("data",):
        print()
        print("\n".join(textwrap.wrap("From the newer definitions (Kafka 4.4.0's group-coordinator jar), the "
                                     "records whose names start with: " + ", ".join(newer[1]) + ".", width=100)))
    elif newer is not None:
        print()
        print("\n".join(textwrap.wrap("From the newer definitions (Kafka 4.4.0's; see the generator's "
                                     "docstring), the requests and responses of: " + ", ".join(newer[1]) + ".",
                                     width=100)))
    print('"""')
    print()
    print("from odradek.protocol.schema_table import LazySchemaTable")
    print()
    print("# fmt: off")
    print("MESSAGES = LazySchemaTable({")
    for name in sorted(messages):
        print(f"    {name!r}: {json.dumps(messages[name], separators=(',', ':'))!r},")
    print("})")

if __name__ == "__main__":
    if sys.argv[1] == "--data" and len(sys.argv) == 6 and sys.argv[3] == "--newer":
        main(sys.argv[2], ("data",), newer=(sys.argv[4], tuple(sys.argv[5].split(","))))
    elif sys.argv[1] == "--data":
        main(sys.argv[2], ("data",))
    elif len(sys.argv) == 5 and sys.argv[2] == "--newer":
        main(sys.argv[1], newer=(sys.argv[3], tuple(sys.argv[4].split(","))))
    else:
        main(sys.argv[1])
