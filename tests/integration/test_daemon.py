"""The odradek command itself: configuration errors stop it, the environment configures it, and
SIGTERM/SIGINT shut it down cleanly with the clean-shutdown marker in place."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.broker_process import REPO, BrokerProcess, free_port
from tests.support.wire import WireClient


def run_daemon(args: list[str], env: dict[str, str] | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(REPO))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "odradek.broker.main", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def test_invalid_value_stops_start_up_naming_the_key(tmp_path) -> None:
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}",
                         "--override", "num.partitions=lots"])
    assert result.returncode == 1
    assert "num.partitions" in result.stderr and "lots" in result.stderr


def test_unsupported_listener_protocol_stops_start_up(tmp_path) -> None:
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}",
                         "--override", "listeners=SSL://127.0.0.1:9999"])
    assert result.returncode == 1
    assert "listeners" in result.stderr


def test_unknown_key_warns_and_the_broker_serves(tmp_path) -> None:
    broker = BrokerProcess(tmp_path, overrides={"no.such.setting": "1"}).start()
    try:
        with WireClient(broker.host, broker.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        broker.stop()
    assert "no.such.setting" in broker.log_text()


def test_settings_without_effect_are_listed_in_one_start_up_warning(tmp_path) -> None:
    broker = BrokerProcess(tmp_path, overrides={
        "background.threads": "4", "log.preallocate": "true",  # no effect
        "fetch.max.bytes": "1048576", "max.connections": "500", "producer.id.expiration.ms": "60000",  # work
        "transactional.id.expiration.ms": "3600000",  # works since the transaction coordinator
    }).start()
    try:
        with WireClient(broker.host, broker.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        broker.stop()
    lines = [ln for ln in broker.log_text().splitlines() if "have no effect" in ln]
    assert len(lines) == 1, lines
    listed = lines[0].split("have no effect in Odradek: ", 1)[1]
    keys = [item.split(" (", 1)[0] for item in listed.split("; ")]
    assert keys == ["background.threads", "log.preallocate"]


def connect_when_up(proc: subprocess.Popen, port: int, timeout: float = 20.0) -> WireClient:
    """A client connected to the daemon ``proc`` once it listens on ``port`` (its stderr if it dies)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return WireClient("127.0.0.1", port)
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)


def test_environment_variables_configure_the_broker(tmp_path) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), KAFKA_NODE_ID="1", KAFKA_LOG_DIRS=str(tmp_path / "logs"),
               KAFKA_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}", KAFKA_NUM_PARTITIONS="3")
    proc = subprocess.Popen([sys.executable, "-m", "odradek.broker.main"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        c = connect_when_up(proc, port)
        with c:
            resp = c.request(3, 12, {"topics": [{"name": "env-auto"}], "allow_auto_topic_creation": True})
        assert len(resp["topics"][0]["partitions"]) == 3
        assert (tmp_path / "logs" / "env-auto-2").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_sigterm_and_sigint_shut_down_cleanly_with_the_marker(tmp_path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        data = tmp_path / sig.name
        broker = BrokerProcess(data).start()
        with WireClient(broker.host, broker.port) as c:
            c.request(19, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1}],
                              "timeout_ms": 5000})
        broker.proc.send_signal(sig)
        assert broker.proc.wait(20) == 0
        broker.kill()
        assert (data / "logs" / ".kafka_cleanshutdown").exists()
        assert "shut down cleanly" in broker.log_text()


def test_sigkill_leaves_no_marker_and_the_next_start_recovers(tmp_path) -> None:
    broker = BrokerProcess(tmp_path).start()
    broker.kill()
    assert not (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    broker.start()
    with WireClient(broker.host, broker.port) as c:
        assert c.request(18, 0, {})["error_code"] == 0
    broker.stop()


def _first_response(b: BrokerProcess, api_key: int, version: int, body: dict, timeout: float = 20.0) -> dict:
    """Connect the instant the port opens (polling every millisecond) and send one request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert b.proc is not None and b.proc.poll() is None, b.log_text()
        try:
            client = WireClient(b.host, b.port)
        except OSError:
            time.sleep(0.001)
            continue
        with client:
            return client.request(api_key, version, body)
    raise AssertionError(f"the broker never accepted a connection:\n{b.log_text()}")


def test_the_first_client_request_already_sees_this_broker(tmp_path) -> None:
    # The broker registers its endpoint before it accepts: a client connecting the moment the port
    # opens must find it in DescribeCluster and Metadata (an empty broker list makes clients give
    # up on the bootstrap). Several fresh starts, because the window it closes was a few ms wide.
    for attempt in range(3):
        b = BrokerProcess(tmp_path / f"cluster{attempt}")
        b.spawn()
        try:
            resp = _first_response(b, 60, 0, {"include_cluster_authorized_operations": False})
            assert resp["error_code"] == 0
            assert [(x["broker_id"], x["port"]) for x in resp["brokers"]] == [(1, b.port)]
            assert resp["controller_id"] == 1
        finally:
            b.kill()
        b = BrokerProcess(tmp_path / f"metadata{attempt}")
        b.spawn()
        try:
            resp = _first_response(b, 3, 12, {"topics": None, "allow_auto_topic_creation": False})
            assert [(x["node_id"], x["port"]) for x in resp["brokers"]] == [(1, b.port)]
            assert resp["controller_id"] == 1
        finally:
            b.kill()


def test_debug_level_logs_each_request_and_its_response(tmp_path, monkeypatch) -> None:
    # Kafka's kafka.request.logger: with --log-level DEBUG the odradek.request logger writes a line
    # when a request is decoded and one when its response is handed to the connection.
    monkeypatch.setenv("ODRADEK_LOG_LEVEL", "DEBUG")
    b = BrokerProcess(tmp_path / "b").start()
    try:
        with WireClient(b.host, b.port, client_id="tracer") as c:
            c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
            c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})
        deadline = time.monotonic() + 10
        while "Metadata v12 corr=2 after" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = b.log_text()
        assert "request 127.0.0.1:" in text and "ApiVersions v3 corr=1 client=tracer" in text
        assert "Metadata v12 corr=2 client=tracer" in text
        assert "ApiVersions v3 corr=1 after" in text and "Metadata v12 corr=2 after" in text
    finally:
        b.kill()
    # At the default level the request logger stays silent.
    monkeypatch.delenv("ODRADEK_LOG_LEVEL")
    quiet = BrokerProcess(tmp_path / "quiet").start()
    try:
        with WireClient(quiet.host, quiet.port, client_id="tracer") as c:
            c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert "client=tracer" not in quiet.log_text()
    finally:
        quiet.kill()


# Security is not implemented: a setting asking for it must stop start-up (exit 1, one message naming
# every such key), never leave the broker running open. Kafka's docker image maps KAFKA_SSL_* etc.
# to these keys, so the environment is checked as well.
SECURITY_CASES = [
    (["principal.builder.class=com.example.Builder"], ["principal.builder.class"]),
    (["sasl.kerberos.service.name=kafka"], ["sasl.kerberos.service.name"]),
    (["listener.name.client.gssapi.sasl.kerberos.service.name=x"],
     ["listener.name.client.gssapi.sasl.kerberos.service.name"]),
]


def test_security_settings_stop_start_up_naming_every_key(tmp_path) -> None:
    for settings, named in SECURITY_CASES:
        args = ["--override", "node.id=1", "--override", f"log.dirs={tmp_path}"]
        for s in settings:
            args += ["--override", s]
        result = run_daemon(args)
        assert result.returncode == 1, (settings, result.stderr)
        assert "not implemented yet" in result.stderr, result.stderr
        for word in named:
            assert word in result.stderr, (word, result.stderr)
        assert "is ignored" not in result.stderr  # never the "unknown key" warning for these


def test_an_authorizer_other_than_kafkas_standard_authorizer_stops_start_up(tmp_path) -> None:
    # ACLs are implemented (docs/security-acls.md): only Kafka's StandardAuthorizer, or none.
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}", "--override",
                         "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"])
    assert result.returncode == 1, result.stderr
    assert "authorizer.class.name" in result.stderr and "StandardAuthorizer" in result.stderr, result.stderr


def test_sasl_listener_needing_gssapi_stops_start_up_naming_the_key(tmp_path) -> None:
    # SASL_PLAINTEXT is served (broker/security/sasl/), but Kafka's default sasl.enabled.mechanisms is
    # GSSAPI, which Odradek does not implement.
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}",
                         "--override", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         "--override", "listener.name.sasl_plaintext.plain.sasl.jaas.config=x required;"])
    assert result.returncode == 1
    assert "sasl.enabled.mechanisms enables GSSAPI (Kafka's default)" in result.stderr, result.stderr
    assert "required;" not in result.stderr  # a JAAS value is never echoed


def test_security_setting_from_the_environment_stops_start_up(tmp_path) -> None:
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}"],
                        env={"KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka"})
    assert result.returncode == 1
    assert "sasl.kerberos.service.name" in result.stderr and "not implemented yet" in result.stderr


def test_empty_security_setting_and_the_default_protocol_map_still_start(tmp_path) -> None:
    # Kafka's default listener.security.protocol.map names SSL and SASL protocols; naming them is
    # not asking for them. An empty value asks for nothing either.
    broker = BrokerProcess(tmp_path, overrides={
        "ssl.endpoint.identification.algorithm": "",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
    }).start()
    try:
        with WireClient(broker.host, broker.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        broker.stop()


def test_a_second_broker_on_the_same_data_directory_names_it_and_the_holder(tmp_path) -> None:
    first = BrokerProcess(tmp_path / "first").start()
    try:
        logs = first.overrides["log.dirs"]
        second = BrokerProcess(tmp_path / "second", overrides={"log.dirs": logs})
        assert second.spawn().wait(20) == 1
        second.kill()
        text = second.log_text()
        assert "Traceback" not in text, text
        (error,) = [line for line in text.splitlines() if " ERROR " in line]
        assert str(Path(logs).resolve()) in error and f"process {first.proc.pid}" in error, error
        # The first broker was not disturbed and still serves.
        with WireClient(first.host, first.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        assert first.stop() == 0


def test_odradek_without_a_config_file_runs_the_single_node_default(tmp_path) -> None:
    # `pip install odradek && odradek`: no file, no node.id. The port comes from the environment only
    # because 9092 may be taken on a shared machine; everything else is the built-in configuration.
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), KAFKA_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}")
    env.pop("KAFKA_LOG_DIRS", None)
    env.pop("KAFKA_NODE_ID", None)
    proc = subprocess.Popen([sys.executable, "-m", "odradek.broker.main"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        c = connect_when_up(proc, port)
        with c:
            resp = c.request(3, 12, {"topics": [{"name": "first-hour"}], "allow_auto_topic_creation": True})
        assert resp["topics"][0]["error_code"] == 0
        assert (tmp_path / "data" / "kafka-logs" / "first-hour-0").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def _wait_for_lines(b: BrokerProcess, text: str, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while b.log_text().count(text) < count:
        assert time.monotonic() < deadline, f"{count} x {text!r} not logged"
        time.sleep(0.05)


def test_loading_the_offsets_topic_logs_one_summary_line(tmp_path) -> None:
    b = BrokerProcess(tmp_path, overrides={"offsets.topic.num.partitions": "8"}).start()
    try:
        with WireClient(b.host, b.port) as c:  # creates __consumer_offsets (8 partitions)
            deadline = time.monotonic() + 20
            while c.request(10, 3, {"key": "g", "key_type": 0})["error_code"] != 0:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        # FindCoordinator answers before the partitions are loaded (as Kafka's does: later group
        # requests get COORDINATOR_LOAD_IN_PROGRESS), so wait for the load's line, at each start.
        _wait_for_lines(b, "loaded 8 __consumer_offsets partitions", 1)
        b.restart()
        _wait_for_lines(b, "loaded 8 __consumer_offsets partitions", 2)
        assert b.stop() == 0
    finally:
        b.kill()
    lines = [line for line in b.log_text().splitlines() if "__consumer_offsets" in line and " INFO " in line]
    loaded = [line for line in lines if "loaded" in line]
    assert len(loaded) == 2, lines  # one at creation, one at the restart - not one per partition
    assert all("loaded 8 __consumer_offsets partitions" in line for line in loaded), loaded


def test_log_config_file_routes_logs_to_a_file_at_its_level(tmp_path) -> None:
    """--log-config (a logging.config.fileConfig file) is honoured: the broker's own logs, and the
    request logger at DEBUG, go to the file the operator chose."""
    log_file = tmp_path / "odradek.log"
    ini = (REPO / "config" / "logging.ini").read_text()
    ini = ini.replace("keys=stderr", "keys=stderr,file").replace("handlers=stderr", "handlers=stderr,file")
    ini = ini.replace("[logger_request]\nlevel=INFO\nhandlers=", "[logger_request]\nlevel=DEBUG\nhandlers=")
    ini += f"\n[handler_file]\nclass=FileHandler\nformatter=kafka\nargs=({str(log_file)!r},)\n"
    conf = tmp_path / "logging.ini"
    conf.write_text(ini)
    broker = BrokerProcess(tmp_path / "b", overrides={})
    broker.command = lambda: [sys.executable, "-m", "odradek.broker.main", "--log-config", str(conf),  # type: ignore[method-assign]
                              *(a for k, v in broker.overrides.items() for a in ("--override", f"{k}={v}"))]
    broker.start()
    try:
        with WireClient(broker.host, broker.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        broker.stop()
    text = log_file.read_text()
    assert "] INFO " in text and "(odradek." in text  # the default Kafka-like layout
    assert "(odradek.request)" in text  # DEBUG of the request logger honoured


def test_missing_log_config_file_exits_with_one_line(tmp_path) -> None:
    result = run_daemon(["--log-config", str(tmp_path / "nope.ini"), "--override", "node.id=1",
                         "--override", f"log.dirs={tmp_path}"])
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.ini" in lines[0] and "Traceback" not in result.stderr


def test_bad_log_config_file_exits_with_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}')
    result = run_daemon(["--override", "node.id=1", "--override", f"log.dirs={tmp_path}"],
                        env={"ODRADEK_LOG_CONFIG": str(bad)})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and "Traceback" not in result.stderr


def test_single_node_start_up_stays_under_half_a_second(tmp_path) -> None:
    """Cluster mode must not slow the default: the broker's own start (lease, replay, logs, sockets)
    stays under 0.5 s, and a single node never loads the etcd client (gRPC)."""
    import re

    b = BrokerProcess(tmp_path, overrides={"odradek.metrics.port": "-1"}).start()
    try:
        deadline = time.monotonic() + 10  # the line follows the first accept by a moment
        while not re.findall(r"started in (\d+) ms", b.log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = re.findall(r"started in (\d+) ms", b.log_text())
        assert started and int(started[0]) < 500, b.log_text()
    finally:
        b.stop()
    code = ("import sys, odradek.broker.main, odradek.broker.server, odradek.broker.metadata.broker_registration, odradek.broker.api.handlers; "
            "print(sorted(m for m in sys.modules if m.startswith(('grpc', 'aetcd'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_help_names_the_cluster_subcommand() -> None:
    result = run_daemon(["--help"])
    assert result.returncode == 0, result.stderr
    assert "(one node)" not in result.stdout
    usage = result.stdout.split("\n\n")[0].splitlines()
    assert usage[0].startswith("usage: odradek [config]") and usage[1].strip().startswith("odradek cluster"), usage
    assert "cluster     etcd plus N brokers" in result.stdout and "odradek cluster --help" in result.stdout


def test_log_dirs_override_without_a_config_file_is_the_data_dir_logged_and_used(tmp_path) -> None:
    # `odradek --override log.dirs=X`: the built-in configuration with X as its data dir; the start-up
    # line named ./data/kafka-logs under the working directory instead.
    port, work, elsewhere = free_port(), tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), KAFKA_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}")
    env.pop("KAFKA_LOG_DIRS", None)
    env.pop("KAFKA_NODE_ID", None)
    proc = subprocess.Popen([sys.executable, "-m", "odradek.broker.main", "--override", f"log.dirs={elsewhere}"], cwd=work,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with connect_when_up(proc, port) as c:
            resp = c.request(3, 12, {"topics": [{"name": "moved"}], "allow_auto_topic_creation": True})
        assert resp["topics"][0]["error_code"] == 0
        assert (elsewhere / "moved-0").is_dir() and not (work / "data").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    (line,) = [x for x in proc.stderr.read().splitlines() if "built-in single-node configuration" in x]
    assert line.endswith(f"data in {elsewhere} (odradek.broker.config.broker_config)"), line


def test_a_port_in_use_stops_start_up_naming_the_address_and_the_listener(tmp_path) -> None:
    holder = BrokerProcess(tmp_path / "holder").start()
    second = BrokerProcess(tmp_path / "second").start()
    try:
        with WireClient(second.host, second.port) as c:
            c.request(19, 7, {"topics": [{"name": "kept", "num_partitions": 1, "replication_factor": 1}],
                              "timeout_ms": 5000})
        assert second.stop() == 0
        taken = BrokerProcess(tmp_path / "second", port=holder.port)
        assert taken.spawn().wait(20) == 1
        taken.kill()
        text = taken.log_text()
        assert "Traceback" not in text, text
        attempt = text[text.rindex("Open files limit"):]  # this start's lines, after the first run's
        (error,) = [line for line in attempt.splitlines() if " ERROR " in line]
        assert (f"Socket server failed to bind to 127.0.0.1:{holder.port} (listener PLAINTEXT): "
                "Address already in use.") in error, error
        assert "shut down cleanly" not in attempt and "did not start" in attempt, attempt
        # Nothing lost: the topic is there and the next start on a free port needs no recovery.
        assert (tmp_path / "second" / "logs" / "kept-0").is_dir()
        assert (tmp_path / "second" / "logs" / ".kafka_cleanshutdown").exists()
        second.start()
        with WireClient(second.host, second.port) as c:
            topics = c.request(3, 12, {"topics": None})["topics"]
        assert [t["name"] for t in topics if not t["name"].startswith("__")] == ["kept"]
        # The broker holding the port was not disturbed.
        with WireClient(holder.host, holder.port) as c:
            assert c.request(18, 0, {})["error_code"] == 0
    finally:
        second.stop()
        holder.stop()
