"""Streams-group topology descriptions (KIP-1331) as Kafka 4.4 serves them with its default
configuration, the only one Odradek has.

A topology description is a Kafka Streams application's processor graph (per subtopology its
source, processor and sink nodes, their stores and successors; the global stores), pushed by a
member with StreamsGroupTopologyDescriptionUpdate (API 93) when a StreamsGroupHeartbeat v1 answer
sets TopologyDescriptionRequired, and shown by StreamsGroupDescribe v1 when asked
(IncludeTopologyDescription) and by ``kafka-streams-groups --describe``.

Kafka 4.4 does not write descriptions to __consumer_offsets: it hands them to a broker plugin
(``group.streams.topology.description.plugin.class``, a Java StreamsGroupTopologyDescriptionPlugin)
and persists only the topology epochs the plugin holds or refused (StreamsGroupMetadataValue's
tagged StoredDescriptionTopologyEpoch and FailedDescriptionTopologyEpoch). The plugin is unset by
default, and then (Kafka's StreamsGroupTopologyDescriptionManager and GroupCoordinatorService):

- no heartbeat sets TopologyDescriptionRequired;
- StreamsGroupTopologyDescriptionUpdate, once KafkaApis has let it through (streams.version above
  0, READ on the group) and the coordinator runs, is UNSUPPORTED_VERSION with NO_PLUGIN, before any
  group or member lookup and whatever the request holds;
- StreamsGroupDescribe v1 answers a found group's TopologyDescriptionStatus NOT_STORED with a null
  TopologyDescription when asked, NOT_REQUESTED when not.

Odradek cannot load a Java plugin, so broker_config refuses a value for the plugin key and this
module is that default. A description store of Odradek's own would answer here.

Pure functions; any thread.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode

# StreamsGroupDescribeResponse's TopologyDescriptionStatus (Kafka's StreamsGroupDescribeResponse
# TOPOLOGY_DESCRIPTION_STATUS_*).
NOT_REQUESTED, NOT_STORED, ERROR, AVAILABLE = 0, 1, 2, 3

NO_PLUGIN = "The broker has no streams group topology description plugin configured."


def describe_status(include_topology_description: bool) -> int:
    """A found group's TopologyDescriptionStatus (its TopologyDescription stays null)."""
    return NOT_STORED if include_topology_description else NOT_REQUESTED


def update_outcome() -> tuple[ErrorCode, str]:
    """The (error, message) of a StreamsGroupTopologyDescriptionUpdate that reached the coordinator."""
    return ErrorCode.UNSUPPORTED_VERSION, NO_PLUGIN
