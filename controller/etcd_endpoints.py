"""The etcd members a node talks to: ``host:port[,host:port...]``, parsed in one place.

Format: comma-separated ``host:port`` (an ``etcd://`` prefix allowed, a trailing ``/`` ignored, an
IPv6 host in brackets, ports 1-65535). ``metadata.store``'s config check and the etcd client
(``odradek.controller.etcd_client.grpc_target``) both parse with it. It imports nothing of the etcd client,
so checking the configuration of a single node loads no gRPC.
"""

from __future__ import annotations

ETCD_SCHEME = "etcd://"


def parse_etcd_endpoints(text: str) -> list[tuple[str, int]]:
    """The (host, port) of every member, in the order given; ValueError naming the bad part."""
    endpoints = []
    for part in text.removeprefix(ETCD_SCHEME).rstrip("/").split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{part.strip()!r} is not host:port")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints
