"""Replica placement for new partitions: which brokers host each replica, leader first.

A simplified ``StripedReplicaPlacer``: unfenced brokers are used round-robin, each partition
starting one broker further than the previous so leadership spreads evenly; fenced brokers are only
used when there are not enough unfenced ones (they then start outside the ISR). Racks are not yet
considered (TODO: stripe across racks as Kafka does).

Errors are Kafka's InvalidReplicationFactorException messages; the caller prefixes them with
"Unable to replicate the partition <rf> time(s): ".

Pure functions; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable


class PlacementError(ValueError):
    """Placement is impossible; ``str(e)`` is Kafka's message."""


def place_replicas(
    start_partition: int,
    num_partitions: int,
    replication_factor: int,
    unfenced: Iterable[int],
    fenced: Iterable[int] = (),
) -> list[tuple[int, ...]]:
    """Return ``num_partitions`` replica lists for partitions ``start_partition...``."""
    live = sorted(unfenced)
    dead = sorted(fenced)
    if replication_factor <= 0:
        raise PlacementError(
            f"Invalid replication factor {replication_factor}: the replication factor must be positive."
        )
    if not live:
        raise PlacementError("All brokers are currently fenced.")
    total = len(live) + len(dead)
    if replication_factor > total:
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{total} broker(s) are registered."
        )
    out: list[tuple[int, ...]] = []
    n = len(live)
    for p in range(start_partition, start_partition + num_partitions):
        replicas = [live[(p + i) % n] for i in range(min(replication_factor, n))]
        replicas.extend(dead[: replication_factor - len(replicas)])
        out.append(tuple(replicas))
    return out
