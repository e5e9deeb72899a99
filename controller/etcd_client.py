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
first call and reconnects after ``close``. Several endpoints (an etcd cluster) become one gRPC target
(``grpc_target``).
"""

from __future__ import annotations

import socket
from typing import Any

import aetcd

from odradek.controller.etcd_endpoints import parse_etcd_endpoints

# Errors a store call can raise when etcd cannot be reached or refuses the request.
EtcdError = aetcd.exceptions.ClientError


def grpc_target(endpoints: str) -> tuple[str, int]:
    """The (host, port) to give aetcd for ``host:port[,host:port...]`` (an ``etcd://`` prefix allowed).

    One endpoint is passed as it is. Several become one gRPC target listing every member's address
    (``ipv4:a:p,b:p``; names are resolved once, here): gRPC's pick_first policy then connects to the
    first member that answers and moves to the next when it goes away, which is how a broker rides
    out the loss of one etcd member. aetcd builds its target as ``f"{host}:{port}"``, so the list
    travels in ``host`` with the last port as ``port``.
    """
    parts = parse_etcd_endpoints(endpoints)
    if len(parts) == 1:
        return parts[0]
    addresses = [f"{_ipv4(host)}:{port}" for host, port in parts]
    last_host, last_port = addresses[-1].rsplit(":", 1)
    return "ipv4:" + ",".join([*addresses[:-1], last_host]), int(last_port)


def _ipv4(host: str) -> str:
    try:
        socket.inet_aton(host)
        return host
    except OSError:
        return socket.gethostbyname(host.strip())


# gRPC's default 4 MiB cap on a received message would make a Range larger than that fail with
# RESOURCE_EXHAUSTED: the metadata log read at start-up (up to
# metadata.log.max.record.bytes.between.snapshots of batches, 20 MiB by default, plus the snapshot).
# etcd itself sends responses of any size; this bounds only what one answer may hold.
MAX_RECEIVE_MESSAGE_BYTES = 1 << 30
# gRPC's reconnect backoff grows to 120 s by default, so after an etcd outage of half a minute a
# broker could go on failing fast for many seconds more once etcd was back (a cluster test waited
# 30 s in vain). Capped as Kafka caps its clients' reconnect.backoff.max.ms (1 s).
MAX_RECONNECT_BACKOFF_MS = 1000


def etcd_client(endpoint: str, timeout_s: float = 5.0) -> Any:
    """An ``aetcd.Client`` for ``host:port[,host:port...]`` (``Any``: aetcd is untyped); it connects on
    first use."""
    host, port = grpc_target(endpoint)
    return aetcd.Client(host=host, port=port, timeout=timeout_s,
                        options={"grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES,
                                 "grpc.max_reconnect_backoff_ms": MAX_RECONNECT_BACKOFF_MS})
