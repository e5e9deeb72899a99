"""ControlledShutdown (api key 7): a broker about to stop asks the controller to move its leaderships.

Version 3 (flexible, with broker_epoch: the version a shutting-down broker sends). The controller
(``Controller.controlled_shutdown``) moves every partition the broker leads to another live ISR
member and takes it out of the ISRs (never emptying one); ``remaining_partitions`` lists those it
still leads (no other ISR member), so the broker may retry. A stale broker_epoch answers
STALE_BROKER_EPOCH, an unknown broker BROKER_ID_NOT_REGISTERED (Kafka's ZooKeeper-era API, which
KRaft replaced with a heartbeat flag; Odradek's etcd cluster keeps the request). A broker that is
not the controller forwards (``broker.controller_client``).
"""

from __future__ import annotations

from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode, KafkaApiError

API_KEY = 7
NAME = "ControlledShutdown"
VERSIONS = (3, 3)


async def handle(request: ApiRequest) -> dict:
    if not authz.cluster_allowed(request, authz.CLUSTER_ACTION):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    remaining = await request.broker.controller_client.controlled_shutdown(body["broker_id"], body["broker_epoch"])
    return {
        "error_code": ErrorCode.NONE,
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
    }


def error_response(request: ApiRequest, code: int) -> dict:
    return {"error_code": code, "remaining_partitions": []}
