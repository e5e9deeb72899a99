"""The README's "certificates for a test setup" recipe (config/tls/make-test-certs.sh, openssl) works:
a broker with mutual TLS on its files serves a client holding the recipe's client certificate,
and maps its principal from the certificate (CN=alice,OU=Clients,O=Odradek Test)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, free_port

SCRIPT = Path(__file__).resolve().parents[2] / "config" / "tls" / "make-test-certs.sh"


def test_openssl_recipe_certificates_serve_mutual_tls(tmp_path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the recipe needs the openssl command")
    certs = tmp_path / "certs"
    subprocess.run([str(SCRIPT), str(certs)], check=True, capture_output=True, timeout=60)
    plain, tls = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}"
    old = os.environ.get("ODRADEK_LOG_LEVEL")
    os.environ["ODRADEK_LOG_LEVEL"] = "DEBUG"
    try:
        broker = BrokerProcess(tmp_path / "broker", port=plain, overrides={
            "listeners": listeners, "advertised.listeners": listeners,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-keystore.pem"),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
            "ssl.client.auth": "required"}).start()
    finally:
        if old is None:
            os.environ.pop("ODRADEK_LOG_LEVEL")
        else:
            os.environ["ODRADEK_LOG_LEVEL"] = old
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"localhost:{tls}", "security.protocol": "SSL",
                             "ssl.ca.location": str(certs / "ca.pem"),
                             "ssl.certificate.location": str(certs / "client.crt"),
                             "ssl.key.location": str(certs / "client.key")})
        assert 1 in admin.list_topics(timeout=10).brokers
        assert "principal User:CN=alice,OU=Clients,O=Odradek Test" in broker.log_text()
    finally:
        broker.stop()


def test_bad_key_material_stops_the_daemon_naming_the_key_and_never_the_secret(tmp_path) -> None:
    from tests.integration.test_daemon import run_daemon
    from tests.support.certs import TestPki

    server = TestPki(tmp_path / "pki").server("enc", encrypted_key_password="right-password")
    base = ["--override", "node.id=1", "--override", f"log.dirs={tmp_path / 'logs'}",
            "--override", "listeners=SSL://127.0.0.1:0", "--override", "inter.broker.listener.name=SSL"]
    for key, value in server.broker_props().items():
        base += ["--override", f"{key}={value}"]
    cases = [
        (["listener.name.ssl.ssl.keystore.location=/nonexistent/broker.pem"],
         "Cannot read listener.name.ssl.ssl.keystore.location='/nonexistent/broker.pem'"),
        (["ssl.key.password=wrong-password-123"], "cannot load the private key"),
        (["ssl.keystore.type=JKS"], "ssl.keystore.type=JKS is not supported"),
    ]
    for extra, message in cases:
        args = list(base)
        for item in extra:
            args += ["--override", item]
        result = run_daemon(args)
        assert result.returncode == 1, result.stderr
        assert message in result.stderr, result.stderr
        assert "wrong-password-123" not in result.stderr and "Traceback" not in result.stderr
