"""The etcd v3 client the etcd metadata stores share: which one, why, and how an endpoint becomes one.

Why aetcd (PyPI ``aetcd``, 1.x): it is asyncio-native (grpc.aio underneath, so no thread per call
and no blocking of the broker's event loop), it is maintained (1.0.0, 2026-06), and it speaks the
v3 gRPC API directly with everything the stores need: Txn with compares on create_revision,
mod_revision and value; lease grant, keep-alive-once, time-to-live and revoke; prefix Range; Watch.
Measured against etcd 3.5.1 on loopback on a 2-core machine: a lease renewal (keep-alive once plus
a Get) takes about 1.5 ms, a metadata append (one Txn; etcd fsyncs its WAL) about 0.9 ms, a Range of
300 batches 5 ms - far below a lease TTL, and the metadata path is not a hot path. The alternatives were weaker:
``etcd3-async-client``/``aioetcd3`` are unmaintained since 2020-2021 and etcd's HTTP/JSON gateway
would mean base64 keys and values, a hand-written JSON mapping of every message and a streaming
parser for watches. The cost: aetcd brings grpcio and protobuf (about 22 MB installed, grpcio 19 MB).

aetcd ships no type hints (``[tool.mypy.overrides]`` in pyproject.toml): the stores keep its
untyped objects inside and expose only typed values. aetcd's ``Client`` connects lazily on its
first call and reconnects after ``close``. It talks to one endpoint; several (``host:port,...``,
for an etcd cluster) are the next step of issue 12.
"""

from __future__ import annotations

from typing import Any

import aetcd

# Errors a store call can raise when etcd cannot be reached or refuses the request.
EtcdError = aetcd.exceptions.ClientError


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (an ``etcd://`` prefix allowed) to its parts."""
    address = endpoint.removeprefix("etcd://").rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"etcd endpoint must be host:port, got {endpoint!r}")
    return host, int(port)


def etcd_client(endpoint: str, timeout_s: float = 5.0) -> Any:
    """An ``aetcd.Client`` for ``endpoint`` (``Any``: aetcd is untyped); it connects on first use."""
    host, port = parse_endpoint(endpoint)
    return aetcd.Client(host=host, port=port, timeout=timeout_s)
