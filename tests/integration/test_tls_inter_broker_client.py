"""The inter-broker client (broker/network/inter_broker_client.py) against a real SSL listener: TLS built from
the broker's own ssl.* keys, host name verification by ``ssl.endpoint.identification.algorithm``
(default https), and its key store presented when the listener requires client certificates."""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.network.inter_broker_client import NodeClient, NodeUnavailableError
from odradek.broker.security.tls import client_tls
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.certs import TestPki


@pytest.fixture(scope="module")
def pki_and_broker(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("ibc")
    pki = TestPki(tmp / "pki")
    # The certificate names another host: connecting to 127.0.0.1 must fail host name verification.
    server = pki.server("elsewhere", dns=("broker1.example",), ips=())
    plain, tls = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}"
    proc = BrokerProcess(tmp / "broker", port=plain, overrides={
        "listeners": listeners, "advertised.listeners": listeners, **server.broker_props(),
        "ssl.client.auth": "required"}).start()
    yield pki, server, tls
    proc.stop()


def _api_versions(port: int, props: dict[str, str]) -> dict:
    cfg = load_config(None, ["node.id=2", "log.dirs=/tmp/odradek-ibc", "listeners=SSL://127.0.0.1:1",
                             "inter.broker.listener.name=SSL", *(f"{k}={v}" for k, v in props.items())], {})

    async def call() -> dict:
        client = NodeClient("127.0.0.1", port, "broker-2-test", timeout_s=3, tls=client_tls(cfg, "SSL"))
        try:
            return await client.request(18, 3, {"client_software_name": "odradek", "client_software_version": "t"})
        finally:
            await client.close()

    return asyncio.run(call())


def test_host_name_is_verified_by_default(pki_and_broker) -> None:
    pki, server, port = pki_and_broker
    with pytest.raises(NodeUnavailableError, match="certificate verify failed|match"):
        _api_versions(port, server.broker_props())
    relaxed = {**server.broker_props(), "ssl.endpoint.identification.algorithm": ""}
    assert _api_versions(port, relaxed)["error_code"] == 0


def test_a_broker_from_another_ca_is_refused(pki_and_broker, tmp_path) -> None:
    _, server, port = pki_and_broker
    stranger = TestPki(tmp_path / "other", "Other CA").server("stranger")
    props = {**stranger.broker_props(), "ssl.endpoint.identification.algorithm": ""}
    with pytest.raises(NodeUnavailableError):
        _api_versions(port, props)
