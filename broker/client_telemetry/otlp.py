"""What a client pushes (KIP-714): OpenTelemetry's MetricsData protobuf, compressed, read into data points.

Format (PushTelemetry's ``metrics``, content type "OTLP"): the payload is compressed with the
request's ``compression_type`` (Kafka's codec ids and framings, odradek.protocol.compression: 0 none, 1 gzip,
2 snappy, 3 lz4, 4 zstd) and decompresses to one ``opentelemetry.proto.metrics.v1.MetricsData``
(opentelemetry-proto): resource metrics > scope metrics > metrics, each metric one of

- ``gauge``: number data points (a value now);
- ``sum``: number data points with ``aggregation_temporality`` (1 delta, 2 cumulative) and
  ``is_monotonic`` (a counter when true);
- ``histogram``, ``exponential_histogram``, ``summary``: not read (counted in ``Decoded.skipped``):
  Kafka's clients push gauges and sums only.

A number data point's value is ``as_double`` or ``as_int``; its attributes (string keys, values of
any AnyValue kind) become text (arrays and key-value lists as their JSON-like text). Resource and
scope attributes are not read: the broker labels a client's series itself (exporter.py).

``decode(codec, payload, max_bytes)`` raises ``TelemetryDecodeError`` for a payload that does not
decompress, decompresses past ``max_bytes`` (telemetry.max.bytes, as Kafka 4.4's
ClientTelemetryUtils.decompress bounds it), or is not a MetricsData; PushTelemetry answers it with
INVALID_RECORD, as Kafka answers a push its exporter cannot take.

Pure functions; any thread (the handler calls ``decode`` on the IO pool).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_DELTA,
    MetricsData,
    NumberDataPoint,
)

from odradek.protocol.batch_header import InvalidBatchError
from odradek.protocol.compression import decompress

GAUGE, COUNTER, UP_DOWN = "gauge", "counter", "updown"


class TelemetryDecodeError(ValueError):
    """The payload is not a (compressed) MetricsData within the size bound."""


@dataclass(frozen=True)
class Point:
    name: str
    kind: str  # GAUGE, COUNTER (a monotonic sum) or UP_DOWN (a non-monotonic sum)
    value: float
    delta: bool  # a sum's point is the change since the last push (else the running total)
    attributes: tuple[tuple[str, str], ...]
    description: str = ""
    unit: str = ""


@dataclass
class Decoded:
    points: list[Point] = field(default_factory=list)
    skipped: int = 0  # metrics of a kind not read (histograms, summaries)


def decompress_payload(codec: int, payload: bytes | bytearray | memoryview, max_bytes: int) -> bytes | bytearray:
    """The MetricsData bytes of a payload (Kafka's PushTelemetryRequest.metricsData)."""
    if codec == 0:
        return bytes(payload)
    try:
        return decompress(codec, payload, max_size=max_bytes)
    except InvalidBatchError as e:  # CompressionError, DecompressedTooLargeError, UnknownCodecError
        raise TelemetryDecodeError(str(e)) from None


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind == "array_value":
        return "[" + ",".join(_text(v) for v in value.array_value.values) + "]"
    return "{" + ",".join(f"{kv.key}:{_text(kv.value)}" for kv in value.kvlist_value.values) + "}"


def _number(point: NumberDataPoint) -> float:
    return float(point.as_int) if point.WhichOneof("value") == "as_int" else point.as_double


def decode(codec: int, payload: bytes | bytearray | memoryview, max_bytes: int) -> Decoded:
    """The data points of one push (module docstring: what is read)."""
    raw = decompress_payload(codec, payload, max_bytes)
    try:
        data = MetricsData.FromString(bytes(raw))
    except (DecodeError, ValueError) as e:
        raise TelemetryDecodeError(f"not an OpenTelemetry MetricsData: {e}") from None
    out = Decoded()
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind == "gauge":
                    points, point_kind, delta = metric.gauge.data_points, GAUGE, False
                elif kind == "sum":
                    points = metric.sum.data_points
                    point_kind = COUNTER if metric.sum.is_monotonic else UP_DOWN
                    delta = metric.sum.aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA
                else:
                    out.skipped += 1
                    continue
                for p in points:
                    attributes = tuple((kv.key, _text(kv.value)) for kv in p.attributes)
                    out.points.append(Point(metric.name, point_kind, _number(p), delta, attributes,
                                            metric.description, metric.unit))
    return out
