"""Tests for odradek.broker.config.properties (Java .properties parsing) and odradek.broker.config.broker_config (load_config, BrokerConfig).

Real files in tmp_path, the real shipped config/server.properties, no mocks.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import (
    CONFIG_DEFS,
    DEFINITIONS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    config_from_environ,
    env_to_config_key,
    etcd_endpoints,
    keys_without_effect,
    load_config,
    parse_listeners,
    parse_overrides,
)
from odradek.broker.config.properties import PropertiesError, load_properties, parse_properties

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "config" / "server.properties"
NODE = ["node.id=1"]  # the one key Kafka 4 requires


def write(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ----------------------------------------------------------------------------------------------------
# .properties parsing


class TestProperties:
    def test_separators_and_whitespace(self) -> None:
        text = "a=1\nb:2\nc 3\n  d  =  4  \ne\t:\t5\nf\n g = = x\nh::y\n"
        assert parse_properties(text) == {
            "a": "1",
            "b": "2",
            "c": "3",
            "d": "4  ",  # Java keeps trailing whitespace of the value
            "e": "5",
            "f": "",
            "g": "= x",  # only one separator is consumed
            "h": ":y",
        }

    def test_whitespace_then_separator_is_one_separator(self) -> None:
        assert parse_properties("key   =value\nk2 :  v") == {"key": "value", "k2": "v"}

    def test_comments_and_blank_lines(self) -> None:
        text = "# comment\n! also comment\n   # indented comment\n\n \t \nkey=value # not a comment\n"
        assert parse_properties(text) == {"key": "value # not a comment"}

    def test_comment_line_ending_in_backslash_does_not_continue(self) -> None:
        assert parse_properties("# comment \\\nkey=value") == {"key": "value"}

    def test_continuation_lines(self) -> None:
        text = "listeners=PLAINTEXT://a:1,\\\n           PLAINTEXT2://b:2\nnext=1"
        assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2", "next": "1"}

    def test_continuation_line_starting_with_hash_is_not_a_comment(self) -> None:
        assert parse_properties("a=x\\\n  #y\n") == {"a": "x#y"}

    def test_even_backslashes_do_not_continue(self) -> None:
        assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}

    def test_continuation_into_empty_line_ends_value(self) -> None:
        assert parse_properties("a=x\\\n\nb=y") == {"a": "x", "b": "y"}

    def test_continuation_at_end_of_file(self) -> None:
        assert parse_properties("a=x\\") == {"a": "x"}

    def test_crlf_and_cr_line_endings(self) -> None:
        assert parse_properties("a=1\r\nb=2\rc=3\\\r\n  4") == {"a": "1", "b": "2", "c": "34"}

    def test_escapes(self) -> None:
        text = r"k\=ey\:x\ y = a\tb\nc\\d\qe\u0041\u00e9"
        assert parse_properties(text) == {"k=ey:x y": "a\tb\nc\\dqeAé"}

    def test_escaped_comment_char_starts_key(self) -> None:
        assert parse_properties(r"\#notcomment=1") == {"#notcomment": "1"}

    def test_surrogate_pair_escapes(self) -> None:
        assert parse_properties(r"smile=\uD83D\uDE00") == {"smile": "\U0001F600"}

    @pytest.mark.parametrize("bad", [r"a=\u12", r"a=\u12G4", "a=\\u"])
    def test_malformed_unicode_escape(self, bad: str) -> None:
        with pytest.raises(PropertiesError, match=r"line 2: malformed \\uxxxx"):
            parse_properties("ok=1\n" + bad)

    def test_empty_key(self) -> None:
        assert parse_properties("=value") == {"": "value"}

    def test_duplicate_key_last_wins(self) -> None:
        assert parse_properties("a=1\nb=2\na=3") == {"b": "2", "a": "3"}

    def test_load_utf8_latin1_and_bom(self, tmp_path: Path) -> None:
        p = tmp_path / "x.properties"
        p.write_bytes("\ufeffa=é\n".encode())
        assert load_properties(p) == {"a": "é"}
        p.write_bytes("a=\xe9\n".encode("latin-1"))  # not UTF-8: read as ISO-8859-1 like Java
        assert load_properties(p) == {"a": "é"}


# ----------------------------------------------------------------------------------------------------
# Defaults


class TestDefaults:
    def test_kafka_defaults_sample(self) -> None:
        cfg = load_config(None, NODE, {})
        expected = {
            "listeners": "PLAINTEXT://:9092",
            "advertised.listeners": None,
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "auto.create.topics.enable": True,
            "delete.topic.enable": True,
            "message.max.bytes": 1048588,
            "socket.request.max.bytes": 104857600,
            "socket.send.buffer.bytes": 102400,
            "num.network.threads": 3,
            "num.io.threads": 8,
            "queued.max.requests": 500,
            "connections.max.idle.ms": 600000,
            "log.dir": "/tmp/kafka-logs",
            "log.segment.bytes": 1073741824,
            "log.retention.hours": 168,
            "log.retention.bytes": -1,
            "log.retention.check.interval.ms": 300000,
            "log.cleanup.policy": ["delete"],
            "log.index.size.max.bytes": 10485760,
            "log.index.interval.bytes": 4096,
            "log.segment.delete.delay.ms": 60000,
            "log.message.timestamp.type": "CreateTime",
            "log.cleaner.min.cleanable.ratio": 0.5,
            "offsets.topic.num.partitions": 50,
            "offsets.topic.replication.factor": 3,
            "offsets.retention.minutes": 10080,
            "offsets.commit.timeout.ms": 5000,
            "group.initial.rebalance.delay.ms": 3000,
            "group.min.session.timeout.ms": 6000,
            "group.max.session.timeout.ms": 1800000,
            "group.coordinator.rebalance.protocols": ["classic", "consumer"],
            "transaction.state.log.min.isr": 2,
            "transaction.max.timeout.ms": 900000,
            "transactional.id.expiration.ms": 604800000,
            "producer.id.expiration.ms": 86400000,
            "replica.lag.time.max.ms": 30000,
            "replica.fetch.max.bytes": 1048576,
            "unclean.leader.election.enable": False,
            "fetch.max.bytes": 57671680,
            "max.connections": 2**31 - 1,
            "odradek.metrics.port": -1,
            "odradek.event.loop": "uvloop",
        }
        assert {k: cfg[k] for k in expected} == expected
        assert cfg.source("num.partitions") is ConfigSource.DEFAULT_CONFIG
        assert cfg.source("num.partitions") == 5  # Kafka's wire number

    def test_derived_values(self) -> None:
        cfg = load_config(None, NODE, {})
        assert cfg.log_retention_ms == 7 * 24 * 3600 * 1000
        assert cfg.log_roll_ms == 7 * 24 * 3600 * 1000
        assert cfg.log_roll_jitter_ms == 0
        assert cfg.log_flush_interval_ms == 2**63 - 1
        assert cfg.offsets_retention_ms == 7 * 24 * 60 * 60 * 1000
        assert cfg.log_dirs == [Path("/tmp/kafka-logs")]

    def test_every_default_is_valid_and_typed(self) -> None:
        py = {ConfigType.BOOLEAN: bool, ConfigType.INT: int, ConfigType.SHORT: int, ConfigType.LONG: int,
              ConfigType.DOUBLE: float, ConfigType.STRING: str, ConfigType.LIST: list}
        for d in DEFINITIONS:
            assert d.default is None or isinstance(d.default, py[d.type]), d.name
        assert len(CONFIG_DEFS) == len(DEFINITIONS)  # no duplicate names

    def test_log_config_matches_storage_defaults(self) -> None:
        from odradek.storage.log_config import TOPIC_CONFIGS, LogConfig

        cfg = load_config(None, NODE, {})
        assert cfg.log_config() == LogConfig()
        # Every broker synonym storage reads is one we define (else its value could never be set).
        for cdef in TOPIC_CONFIGS.values():
            for broker_key, _factor in cdef.synonyms:
                assert broker_key in CONFIG_DEFS, broker_key

    def test_log_config_follows_broker_keys(self) -> None:
        cfg = load_config(None, [*NODE, "log.retention.minutes=5", "log.cleanup.policy=compact,delete",
                                 "message.max.bytes=2000", "log.roll.hours=2"], {})
        lc = cfg.log_config()
        assert lc.retention_ms == 5 * 60_000 == cfg.log_retention_ms
        assert lc.cleanup_policy == "compact,delete"
        assert lc.max_message_bytes == 2000
        assert lc.segment_ms == 2 * 3600 * 1000 == cfg.log_roll_ms


# ----------------------------------------------------------------------------------------------------
# Shipped config


class TestShippedConfig:
    def test_loads_without_warnings(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING):
            cfg = load_config(SHIPPED, [], {})
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert cfg.node_id == 1
        assert cfg.listeners == [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9092)]
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9092)]
        assert cfg.log_dirs == [Path("data/kafka-logs")]
        assert cfg["offsets.topic.replication.factor"] == 1
        assert cfg["transaction.state.log.replication.factor"] == 1 and cfg["transaction.state.log.min.isr"] == 1
        assert cfg["group.initial.rebalance.delay.ms"] == 0
        assert cfg.source("log.retention.hours") is ConfigSource.STATIC_BROKER_CONFIG
        assert cfg.origin("log.retention.hours") == "file"

    def test_every_key_in_shipped_config_is_defined(self) -> None:
        for key in load_properties(SHIPPED):
            assert key in CONFIG_DEFS, key

    def test_commented_examples_are_valid(self) -> None:
        # The "#key=value" lines in the shipped file must be valid if someone uncomments them.
        lines = SHIPPED.read_text().splitlines()
        examples = [ln[1:] for ln in lines if ln.startswith("#") and "=" in ln and " " not in ln.split("=")[0]]
        assert examples, "expected commented-out examples"
        cfg = load_config(SHIPPED, examples, {})
        for ex in examples:
            key = ex.split("=", 1)[0]
            assert cfg.origin(key) == "override"


# ----------------------------------------------------------------------------------------------------
# Precedence and sources


class TestPrecedence:
    def test_file_env_override(self, tmp_path: Path) -> None:
        p = write(tmp_path, "node.id=1\nnum.partitions=2\nnum.io.threads=3\nnum.network.threads=4\n")
        env = {"KAFKA_NUM_IO_THREADS": "5", "KAFKA_NUM_NETWORK_THREADS": "6"}
        cfg = load_config(p, ["num.network.threads=7"], env)
        assert cfg["num.partitions"] == 2 and cfg.origin("num.partitions") == "file"
        assert cfg["num.io.threads"] == 5 and cfg.origin("num.io.threads") == "env"
        assert cfg["num.network.threads"] == 7 and cfg.origin("num.network.threads") == "override"
        assert cfg["queued.max.requests"] == 500 and cfg.origin("queued.max.requests") == "default"
        for k in ("num.partitions", "num.io.threads", "num.network.threads"):
            assert cfg.source(k) is ConfigSource.STATIC_BROKER_CONFIG
        assert cfg.originals["num.network.threads"] == "7"
        assert cfg.originals["num.partitions"] == "2"

    def test_env_fixes_bad_file_value_and_override_fixes_bad_env(self, tmp_path: Path) -> None:
        # Each later source replaces the earlier raw string before anything is parsed.
        p = write(tmp_path, "node.id=1\nnum.partitions=zero\n")
        cfg = load_config(p, ["num.io.threads=2"], {"KAFKA_NUM_PARTITIONS": "4", "KAFKA_NUM_IO_THREADS": "x"})
        assert cfg["num.partitions"] == 4 and cfg["num.io.threads"] == 2

    def test_environ_none_reads_os_environ(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("KAFKA_NUM_PARTITIONS", "9")
        assert load_config(None, NODE)["num.partitions"] == 9

    def test_values_are_trimmed(self, tmp_path: Path) -> None:
        p = write(tmp_path, "node.id = 1   \nauto.create.topics.enable= TRUE \nlog.dirs= /a , /b \n")
        cfg = load_config(p, [], {})
        assert cfg.node_id == 1 and cfg["auto.create.topics.enable"] is True
        assert cfg.log_dirs == [Path("/a"), Path("/b")]

    def test_override_value_may_contain_equals(self) -> None:
        assert parse_overrides(["a=b=c", "e="]) == {"a": "b=c", "e": ""}

    @pytest.mark.parametrize("bad", ["novalue", "=1", "  =x"])
    def test_malformed_override(self, bad: str) -> None:
        with pytest.raises(ConfigError, match="--override"):
            load_config(None, [*NODE, bad], {})

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="Cannot read config file.*nope.properties"):
            load_config(tmp_path / "nope.properties", [], {})

    def test_malformed_file(self, tmp_path: Path) -> None:
        p = write(tmp_path, "node.id=1\nx=\\u00zz\n")
        with pytest.raises(ConfigError, match="Malformed config file.*line 2"):
            load_config(p, [], {})


class TestEnvironment:
    @pytest.mark.parametrize(
        ("name", "key"),
        [
            ("KAFKA_LOG_DIRS", "log.dirs"),
            ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
            ("KAFKA_ADVERTISED_LISTENERS", "advertised.listeners"),
            ("KAFKA_NODE_ID", "node.id"),
            ("KAFKA_ODRADEK_METRICS_PORT", "odradek.metrics.port"),
            ("KAFKA_SOME__UNDERSCORE", "some_underscore"),
            ("KAFKA_SOME___DASH", "some-dash"),
            ("KAFKA_A___B__C_D", "a-b_c.d"),
            ("KAFKA_FOO____BAR", "foo-.bar"),  # 4 underscores: Java replace() goes left to right: "-."
        ],
    )
    def test_name_mapping(self, name: str, key: str) -> None:
        assert env_to_config_key(name) == key

    @pytest.mark.parametrize(
        "name",
        ["KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_JMX_OPTS",
         "KAFKA_GC_LOG_OPTS", "KAFKA_DEBUG", "KAFKA_HOME", "KAFKA_VERSION", "KAFKA_JMX_PORT",
         "KAFKA_JMX_HOSTNAME", "KAFKA_LOG4J_LOGGERS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
         "KAFKA_", "PATH", "kafka_num_partitions", "XKAFKA_NUM_PARTITIONS"],
    )
    def test_ignored_variables(self, name: str) -> None:
        assert env_to_config_key(name) is None

    def test_launcher_variables_do_not_warn(self, caplog: pytest.LogCaptureFixture) -> None:
        env = {"KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_OPTS": "-Dx=y", "HOME": "/root", "PATH": "/bin"}
        with caplog.at_level(logging.WARNING):
            load_config(None, NODE, env)
        assert caplog.records == []

    def test_cluster_id_variable(self) -> None:
        cid = "5L6g3nShT-eMCtK--X86sw"  # the default of Kafka's docker image
        assert load_config(None, NODE, {"CLUSTER_ID": cid}).cluster_id == cid
        other = "MkU3OEVBNTcwNTJENDM2Qg"
        cfg = load_config(None, NODE, {"CLUSTER_ID": cid, "KAFKA_CLUSTER_ID": other})
        assert cfg.cluster_id == other
        assert load_config(None, NODE, {}).cluster_id is None

    def test_docker_style_environment(self) -> None:
        env = {
            "KAFKA_NODE_ID": "3",
            "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092",
            "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:19092",
            "KAFKA_LOG_DIRS": "/var/lib/odradek/data",
        }
        assert config_from_environ(env) == {
            "advertised.listeners": "PLAINTEXT://broker.example:19092",
            "listeners": "PLAINTEXT://0.0.0.0:9092",
            "log.dirs": "/var/lib/odradek/data",
            "node.id": "3",
        }
        cfg = load_config(None, [], env)
        assert cfg.node_id == 3
        assert cfg.listeners[0].host == "0.0.0.0"
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "broker.example", 19092)]


# ----------------------------------------------------------------------------------------------------
# Unknown keys and invalid values


class TestUnknownKeys:
    def test_unknown_key_warns_and_continues(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        p = write(tmp_path, "node.id=1\nnum.partitions=3\nzookeeper.connect=localhost:2181\n")
        with caplog.at_level(logging.WARNING, logger="odradek.broker.config.broker_config"):
            cfg = load_config(p, ["made.up.key=1"], {"KAFKA_ANOTHER_UNKNOWN": "x"})
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("zookeeper.connect" in m and "file" in m for m in messages)
        assert any("made.up.key" in m and "override" in m for m in messages)
        assert any("another.unknown" in m and "env" in m for m in messages)
        assert len(messages) == 3
        # Start-up continued with everything else intact; unknown keys are kept raw.
        assert cfg["num.partitions"] == 3
        assert cfg.originals["zookeeper.connect"] == "localhost:2181"
        with pytest.raises(KeyError):
            cfg["zookeeper.connect"]

    def test_unknown_key_given_twice_warns_once(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        p = write(tmp_path, "node.id=1\nfoo.bar=1\n")
        with caplog.at_level(logging.WARNING, logger="odradek.broker.config.broker_config"):
            load_config(p, ["foo.bar=2"], {})
        assert len([r for r in caplog.records if "foo.bar" in r.getMessage()]) == 1


class TestKeysWithoutEffect:
    def test_set_keys_without_effect_are_warned_about_once(self, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
        p = write(tmp_path, "node.id=1\nbackground.threads=4\nfetch.max.bytes=1048576\n")
        with caplog.at_level(logging.WARNING, logger="odradek.broker.config.broker_config"):
            cfg = load_config(p, ["log.preallocate=true", "max.connections=100"],
                              {"KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "true"})
        messages = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
        assert len(messages) == 1
        assert [key for key, _ in keys_without_effect(cfg)] == ["background.threads", "log.preallocate"]
        assert f"log.preallocate ({CONFIG_DEFS['log.preallocate'].no_effect})" in messages[0]
        # Keys that work (fetch.max.bytes, max.connections) are not listed, nor unset ones.
        assert "; fetch.max.bytes" not in messages[0] and "max.connections" not in messages[0]

    def test_keys_that_work_are_not_marked(self) -> None:
        for key in ("fetch.max.bytes", "max.connections", "max.connections.per.ip",
                    "max.connections.per.ip.overrides", "producer.id.expiration.ms",
                    "producer.id.expiration.check.interval.ms", "log.retention.ms", "broker.id", "log.dir",
                    "replica.fetch.max.bytes", "replica.fetch.wait.max.ms", "num.replica.fetchers",
                    "replica.lag.time.max.ms", "unclean.leader.election.enable", "inter.broker.listener.name",
                    "security.inter.broker.protocol", "transaction.max.timeout.ms",
                    "transaction.state.log.num.partitions", "transactional.id.expiration.ms",
                    "offsets.commit.timeout.ms", "request.timeout.ms", "replica.socket.receive.buffer.bytes"):
            assert CONFIG_DEFS[key].no_effect == "", key
        assert CONFIG_DEFS["background.threads"].no_effect

    def test_compression_keys_work_at_broker_level(self) -> None:
        """compression.type and the KIP-390 levels are the topics' defaults (broker-side recompression);
        the gzip level is refused as Kafka's GzipCompression.LevelValidator refuses it, also dynamically."""
        for key in ("compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level"):
            assert CONFIG_DEFS[key].no_effect == "" and CONFIG_DEFS[key].dynamic, key
        cfg = load_config(None, [*NODE, "compression.type=zstd", "compression.zstd.level=9"], {})
        assert cfg.log_config().recompression == (4, 9) and keys_without_effect(cfg) == []
        for bad in ("0", "10", "-2"):
            with pytest.raises(ConfigError, match="compression.gzip.level.*-1 or in \\[1, 9\\]"):
                cfg.with_dynamic({"compression.gzip.level": bad})
        assert cfg.with_dynamic({"compression.gzip.level": "1", "compression.type": "gzip"}).log_config().recompression \
            == (1, 1)

    def test_defaults_alone_warn_nothing(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="odradek.broker.config.broker_config"):
            cfg = load_config(None, ["node.id=1"], {})
        assert keys_without_effect(cfg) == [] and caplog.records == []


class TestInvalidValues:
    @pytest.mark.parametrize(
        ("override", "fragments"),
        [
            ("num.partitions=abc", ["num.partitions", "'abc'", "not an int", "an integer in", "at least 1"]),
            ("num.partitions=0", ["num.partitions", "'0'", "at least 1"]),
            ("num.partitions=1.5", ["num.partitions", "'1.5'", "at least 1"]),
            ("num.partitions=1_000", ["num.partitions", "'1_000'"]),
            ("num.partitions=", ["num.partitions", "''"]),
            ("num.io.threads=2147483648", ["num.io.threads", "out of range for an int", "at least 1"]),
            ("socket.send.buffer.bytes=-2147483649", ["socket.send.buffer.bytes", "[-2147483648, 2147483647]"]),
            ("log.retention.bytes=9223372036854775808", ["log.retention.bytes", "out of range for a long"]),
            ("offsets.topic.replication.factor=40000", ["offsets.topic.replication.factor", "short"]),
            ("auto.create.topics.enable=yes", ["auto.create.topics.enable", "'yes'", "true or false"]),
            ("log.message.timestamp.type=createtime", ["log.message.timestamp.type", "CreateTime, LogAppendTime"]),
            ("log.cleanup.policy=delete,archive", ["log.cleanup.policy", "archive", "compact, delete"]),
            ("log.cleaner.min.cleanable.ratio=1.5", ["log.cleaner.min.cleanable.ratio", "in [0, 1]"]),
            ("log.cleaner.min.cleanable.ratio=half", ["log.cleaner.min.cleanable.ratio", "not a number"]),
            ("odradek.event.loop=trio", ["odradek.event.loop", "'trio'", "uvloop, asyncio"]),
            ("odradek.metrics.port=70000", ["odradek.metrics.port", "in [-1, 65535]"]),
            ("compression.type=brotli", ["compression.type", "gzip"]),
            ("process.roles=broker,observer", ["process.roles", "observer", "broker, controller"]),
            ("cluster.id=not-a-uuid", ["cluster.id", "'not-a-uuid'", "22 characters"]),
            ("security.inter.broker.protocol=TLS", ["security.inter.broker.protocol", "PLAINTEXT, SSL"]),
        ],
    )
    def test_invalid_value_names_key_value_and_accepted(self, override: str, fragments: list[str]) -> None:
        with pytest.raises(ConfigError) as e:
            load_config(None, [*NODE, override], {})
        for frag in fragments:
            assert frag in str(e.value)

    def test_invalid_value_in_file(self, tmp_path: Path) -> None:
        p = write(tmp_path, "node.id=1\nlog.segment.bytes=big\n")
        with pytest.raises(ConfigError, match="log.segment.bytes"):
            load_config(p, [], {})

    def test_invalid_value_in_env(self) -> None:
        with pytest.raises(ConfigError, match="'many'.*num.network.threads"):
            load_config(None, NODE, {"KAFKA_NUM_NETWORK_THREADS": "many"})

    def test_valid_edge_values(self) -> None:
        cfg = load_config(None, [*NODE, "num.io.threads=+4", "log.retention.bytes=9223372036854775807",
                                 "auto.create.topics.enable=False", "log.cleaner.min.cleanable.ratio=1",
                                 "log.cleanup.policy= compact , delete ", "process.roles=",
                                 "cluster.id=MkU3OEVBNTcwNTJENDM2Qg"], {})
        assert cfg["num.io.threads"] == 4
        assert cfg["log.retention.bytes"] == 2**63 - 1
        assert cfg["auto.create.topics.enable"] is False
        assert cfg["log.cleaner.min.cleanable.ratio"] == 1.0
        assert cfg["log.cleanup.policy"] == ["compact", "delete"]
        assert cfg["process.roles"] == []
        assert cfg.value_string("log.cleanup.policy") == "compact,delete"
        assert cfg.value_string("auto.create.topics.enable") == "false"
        assert cfg.value_string("log.retention.ms") is None

    def test_node_id_required(self, tmp_path: Path) -> None:
        # With a config file (without one, the built-in single-node configuration applies).
        with pytest.raises(ConfigError, match="node.id"):
            load_config(write(tmp_path, "num.partitions=1\n"), [], {})

    def test_broker_id_is_node_id_synonym(self) -> None:
        assert load_config(None, ["broker.id=4"], {}).node_id == 4
        assert load_config(None, ["broker.id=4", "node.id=4"], {}).node_id == 4
        with pytest.raises(ConfigError, match=r"node.id \(5\) and broker.id \(4\)"):
            load_config(None, ["broker.id=4", "node.id=5"], {})

    def test_either_id_alone_describes_both(self) -> None:
        # Kafka's populateSynonyms: DescribeConfigs shows broker.id = node.id (and the reverse),
        # from the same source, when only one of them is set.
        for given, other in (("node.id", "broker.id"), ("broker.id", "node.id")):
            cfg = load_config(None, [f"{given}=4"], {})
            assert cfg.value_string(other) == "4" and cfg.source(other) == cfg.source(given)
            assert not cfg.is_default(other)

    def test_node_id_below_minus_one(self) -> None:
        with pytest.raises(ConfigError, match="node.id.*at least -1"):
            load_config(None, ["node.id=-2"], {})

    def test_log_dirs_wins_over_log_dir_and_empty_is_rejected(self) -> None:
        cfg = load_config(None, [*NODE, "log.dir=/one", "log.dirs=/two,/three"], {})
        assert cfg.log_dirs == [Path("/two"), Path("/three")]
        assert load_config(None, [*NODE, "log.dir=/one"], {}).log_dirs == [Path("/one")]
        with pytest.raises(ConfigError, match="log.dirs or log.dir"):
            load_config(None, [*NODE, "log.dirs= , "], {})

    def test_retention_synonyms(self) -> None:
        def ret(*o: str) -> int:
            return load_config(None, [*NODE, *o], {}).log_retention_ms

        assert ret("log.retention.hours=1") == 3_600_000
        assert ret("log.retention.hours=1", "log.retention.minutes=2") == 120_000
        assert ret("log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5") == 5
        assert ret("log.retention.hours=-1") == -1
        with pytest.raises(ConfigError, match="log.retention.ms must be unlimited"):
            ret("log.retention.ms=0")

    def test_roll_synonyms(self) -> None:
        cfg = load_config(None, [*NODE, "log.roll.hours=2", "log.roll.jitter.hours=1"], {})
        assert cfg.log_roll_ms == 7_200_000 and cfg.log_roll_jitter_ms == 3_600_000
        cfg = load_config(None, [*NODE, "log.roll.hours=2", "log.roll.ms=10", "log.roll.jitter.ms=3"], {})
        assert cfg.log_roll_ms == 10 and cfg.log_roll_jitter_ms == 3
        with pytest.raises(ConfigError, match="log.roll.ms"):
            load_config(None, [*NODE, "log.roll.ms=0"], {})

    def test_group_session_bounds(self) -> None:
        with pytest.raises(ConfigError, match="group.max.session.timeout.ms.*group.min.session.timeout.ms"):
            load_config(None, [*NODE, "group.min.session.timeout.ms=10000", "group.max.session.timeout.ms=9000"], {})

    @pytest.mark.parametrize(("settings", "message"), [
        # Kafka 4.4's GroupCoordinatorConfig.verifyStreamsGroupConfigs, in its words.
        (["group.streams.min.assignment.interval.ms=2000", "group.streams.max.assignment.interval.ms=1000"],
         "group.streams.max.assignment.interval.ms must be greater than or equal to "
         "group.streams.min.assignment.interval.ms"),
        (["group.streams.min.assignment.interval.ms=2000"],
         "group.streams.assignment.interval.ms must be greater than or equal to group.streams.min.assignment"),
        (["group.streams.assignment.interval.ms=20000"],
         "group.streams.assignment.interval.ms must be less than or equal to group.streams.max.assignment"),
        (["group.streams.num.warmup.replicas=21"],
         "group.streams.num.warmup.replicas must be less than or equal to group.streams.max.warmup.replicas"),
        (["group.streams.rack.aware.assignment.tags=zone,rack,zone"],
         "group.streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
        (["group.streams.assignment.interval.ms=-1"], "group.streams.assignment.interval.ms"),
        # Kafka would load the named Java class; Odradek cannot, and says so rather than ignore it.
        (["group.streams.topology.description.plugin.class=org.apache.kafka.server.streams."
          "InMemoryTopologyDescriptionPlugin"], "group.streams.topology.description.plugin.class must be unset"),
    ])
    def test_streams_group_settings_outside_kafkas_rules_stop_start_up(self, settings: list[str], message: str) -> None:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(None, [*NODE, *settings], {})

    def test_streams_group_settings_kafka_accepts(self) -> None:
        cfg = load_config(None, [*NODE, "group.streams.assignment.interval.ms=0", "group.streams.num.warmup.replicas=20",
                                 "group.streams.rack.aware.assignment.tags=zone,rack"], {})
        assert (cfg["group.streams.assignment.interval.ms"], cfg["group.streams.max.assignment.interval.ms"],
                cfg["group.streams.num.warmup.replicas"], cfg["group.streams.rack.aware.assignment.tags"],
                cfg["group.streams.topology.description.plugin.class"]) == (0, 15000, 20, ["zone", "rack"], None)
        defaults = load_config(None, list(NODE), {})
        assert (defaults["group.streams.assignment.interval.ms"], defaults["group.streams.min.assignment.interval.ms"],
                defaults["group.streams.num.warmup.replicas"], defaults["group.streams.max.warmup.replicas"]) == \
            (1000, 0, 2, 20)

    def test_invalid_log_config_stops_start_up(self) -> None:
        # compression.gzip.level is checked by odradek.storage.log_config; the error still names the key.
        with pytest.raises(ConfigError, match="compression.gzip.level.*-1 or in \\[1, 9\\]"):
            load_config(None, [*NODE, "compression.gzip.level=0"], {})


# ----------------------------------------------------------------------------------------------------
# Listeners


PMAP = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "CLIENT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}


class TestListeners:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("PLAINTEXT://:9092", [Listener("PLAINTEXT", "PLAINTEXT", "", 9092)]),
            ("PLAINTEXT://0.0.0.0:9092", [Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092)]),
            ("plaintext://localhost:0", [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 0)]),
            ("PLAINTEXT://[::1]:9092", [Listener("PLAINTEXT", "PLAINTEXT", "::1", 9092)]),
            (" CLIENT://a.example:1 , INTERNAL://b-1.example:2 ",
             [Listener("CLIENT", "PLAINTEXT", "a.example", 1), Listener("INTERNAL", "PLAINTEXT", "b-1.example", 2)]),
            ("CLIENT://127.0.0.1:9092,INTERNAL://[::1]:9092",  # one IPv4 + one IPv6 may share a port
             [Listener("CLIENT", "PLAINTEXT", "127.0.0.1", 9092), Listener("INTERNAL", "PLAINTEXT", "::1", 9092)]),
            ("CLIENT://:0,INTERNAL://:0", [Listener("CLIENT", "PLAINTEXT", "", 0),
                                           Listener("INTERNAL", "PLAINTEXT", "", 0)]),
            ("", []),
        ],
    )
    def test_parse(self, raw: str, expected: list[Listener]) -> None:
        assert parse_listeners(raw, PMAP) == expected

    def test_str_and_bind_host(self) -> None:
        assert str(Listener("PLAINTEXT", "PLAINTEXT", "::1", 1)) == "PLAINTEXT://[::1]:1"
        assert Listener("PLAINTEXT", "PLAINTEXT", "", 1).bind_host is None
        assert Listener("PLAINTEXT", "PLAINTEXT", "h", 1).bind_host == "h"

    @pytest.mark.parametrize(
        ("raw", "match"),
        [
            ("localhost:9092", "cannot parse 'localhost:9092'"),
            ("PLAINTEXT://localhost", "cannot parse"),
            ("PLAINTEXT://localhost:port", "cannot parse"),
            ("PLAINTEXT://host name:1", "cannot parse"),
            ("PLAINTEXT://localhost:70000", r"port 70000 .* \[0, 65535\]"),
            ("PLAINTEXT://localhost:-1", r"port -1"),
            ("UNMAPPED://localhost:1", "no security protocol defined for listener UNMAPPED"),
            ("CLIENT://a:1,client://b:2", "different name"),
            ("CLIENT://a:1,INTERNAL://b:1", "different port"),
            ("CLIENT://127.0.0.1:1,INTERNAL://127.0.0.2:1", "different port"),
        ],
    )
    def test_malformed(self, raw: str, match: str) -> None:
        with pytest.raises(ConfigError, match=match) as e:
            parse_listeners(raw, PMAP)
        assert "listeners" in str(e.value)

    def test_bad_listener_in_config_names_key(self) -> None:
        with pytest.raises(ConfigError, match="configuration listeners.*cannot parse 'PLAINTEXT:9092'"):
            load_config(None, [*NODE, "listeners=PLAINTEXT:9092"], {})
        with pytest.raises(ConfigError, match="configuration advertised.listeners.*cannot parse"):
            load_config(None, [*NODE, "advertised.listeners=nope"], {})

    def test_custom_listener_names(self) -> None:
        cfg = load_config(None, [*NODE, "listeners=CLIENT://:9092,INTERNAL://127.0.0.1:9093",
                                 "advertised.listeners=CLIENT://public.example:9092,INTERNAL://127.0.0.1:9093",
                                 "listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
                                 "inter.broker.listener.name=INTERNAL"], {})
        assert [ep.name for ep in cfg.listeners] == ["CLIENT", "INTERNAL"]
        assert cfg.advertised_listeners[0] == Listener("CLIENT", "PLAINTEXT", "public.example", 9092)
        assert cfg.inter_broker_listener_name == "INTERNAL"

    def test_custom_name_without_inter_broker_listener_fails_like_kafka(self) -> None:
        with pytest.raises(ConfigError, match="inter.broker.listener.name.*advertised.listeners.*CLIENT"):
            load_config(None, [*NODE, "listeners=CLIENT://:9092", "advertised.listeners=CLIENT://h:9092",
                               "listener.security.protocol.map=CLIENT:PLAINTEXT"], {})

    def test_protocol_map_errors(self) -> None:
        with pytest.raises(ConfigError, match="listener.security.protocol.map.*'CLIENT' is not NAME:PROTOCOL"):
            load_config(None, [*NODE, "listener.security.protocol.map=CLIENT"], {})
        with pytest.raises(ConfigError, match="listener.security.protocol.map.*unknown security protocol 'TLS'"):
            load_config(None, [*NODE, "listener.security.protocol.map=CLIENT:TLS"], {})

    def test_advertised_defaults_to_listeners(self) -> None:
        cfg = load_config(None, [*NODE, "listeners=PLAINTEXT://127.0.0.1:9092"], {})
        assert cfg["advertised.listeners"] is None
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]

    def test_empty_host_is_advertised_as_this_hosts_name(self) -> None:
        # Kafka registers InetAddress.getLocalHost.getCanonicalHostName for an empty host.
        rebuilt = BrokerConfig.from_props({"node.id": "1", "listeners": "PLAINTEXT://:9092"},
                                          hostname=lambda: "box.example")
        assert rebuilt.listeners[0].host == ""
        assert rebuilt.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "box.example", 9092)]

    @pytest.mark.parametrize(
        "opts",
        [
            ["listeners=PLAINTEXT://0.0.0.0:9092"],  # advertised defaults to the wildcard: Kafka rejects
            ["listeners=PLAINTEXT://:9092", "advertised.listeners=PLAINTEXT://0.0.0.0:9092"],
            ["listeners=PLAINTEXT://[::]:9092"],
        ],
    )
    def test_wildcard_not_advertisable(self, opts: list[str]) -> None:
        with pytest.raises(ConfigError, match="nonroutable meta-address"):
            load_config(None, [*NODE, *opts], {})

    def test_advertised_name_must_be_a_listener(self) -> None:
        with pytest.raises(ConfigError, match=r"advertised.listeners.*\['OTHER'\] are not in listeners"):
            load_config(None, [*NODE, "listeners=PLAINTEXT://:9092",
                               "advertised.listeners=PLAINTEXT://h:9092,OTHER://h:9093",
                               "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"], {})

    def test_no_listeners(self) -> None:
        with pytest.raises(ConfigError, match="at least one listener"):
            load_config(None, [*NODE, "listeners="], {})

    def test_empty_advertised_listeners(self) -> None:
        with pytest.raises(ConfigError, match="configuration advertised.listeners: no listener.*it is empty"):
            load_config(None, NODE, {"KAFKA_ADVERTISED_LISTENERS": ""})
        with pytest.raises(ConfigError, match="only controller listeners"):
            load_config(None, [*NODE, "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
                               "advertised.listeners=CONTROLLER://h:9093", "controller.listener.names=CONTROLLER",
                               "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"], {})

    @pytest.mark.parametrize("kraft_key", ["process.roles=broker,controller", "controller.quorum.voters=1@h:9093"])
    def test_kraft_quorum_keys_are_refused_pointing_to_metadata_store(self, kraft_key: str) -> None:
        with pytest.raises(ConfigError) as e:
            load_config(None, [*NODE, kraft_key], {})
        assert kraft_key.split("=")[0] in str(e.value) and "metadata.store" in str(e.value)

    @pytest.mark.parametrize("store", ["etcd://x", "zk://h:2181", "etcd://h:2379,h2", "etcd://h:0"])
    def test_malformed_metadata_store(self, store: str) -> None:
        with pytest.raises(ConfigError, match="metadata.store"):
            load_config(None, [*NODE, f"metadata.store={store}"], {})

    def test_metadata_store_endpoints(self) -> None:
        cfg = load_config(None, [*NODE, "metadata.store=etcd://10.0.0.1:2379, etcd2:2380"], {})
        assert etcd_endpoints(cfg["metadata.store"]) == [("10.0.0.1", 2379), ("etcd2", 2380)]
        assert load_config(None, NODE, {})["metadata.store"] == "local"

    def test_kraft_style_config_with_controller_listener(self, tmp_path: Path) -> None:
        # A Kafka 4 combined-mode file, less its KRaft quorum keys (refused, see above): the
        # CONTROLLER listener is bound but never advertised.
        p = write(tmp_path, "\n".join([
            "node.id=1",
            "controller.quorum.bootstrap.servers=localhost:9093",
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
            "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs=/tmp/kraft-combined-logs",
        ]))
        cfg = load_config(p, [], {})
        assert [ep.name for ep in cfg.listeners] == ["PLAINTEXT", "CONTROLLER"]
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9092)]


# ----------------------------------------------------------------------------------------------------
# Dynamic updates


class TestDynamic:
    def test_with_dynamic(self, tmp_path: Path) -> None:
        p = write(tmp_path, "node.id=1\nnum.io.threads=4\nlog.retention.hours=1\n")
        cfg = load_config(p, [], {})
        new = cfg.with_dynamic({"num.io.threads": "6", "log.retention.ms": "1000"})
        assert new["num.io.threads"] == 6 and new.source("num.io.threads") is ConfigSource.DYNAMIC_BROKER_CONFIG
        assert new.log_retention_ms == 1000 and new.log_config().retention_ms == 1000
        assert cfg["num.io.threads"] == 4  # the original is untouched
        back = new.with_dynamic({"num.io.threads": None})
        assert back["num.io.threads"] == 4 and back.origin("num.io.threads") == "file"
        assert back["log.retention.ms"] == 1000  # other dynamic values survive

    def test_static_key_rejected(self) -> None:
        cfg = load_config(None, NODE, {})
        with pytest.raises(ConfigError, match="node.id.*read-only"):
            cfg.with_dynamic({"node.id": "2"})
        with pytest.raises(ConfigError, match="Unknown configuration nope"):
            cfg.with_dynamic({"nope": "1"})

    def test_invalid_dynamic_value_rejected(self) -> None:
        cfg = load_config(None, NODE, {})
        with pytest.raises(ConfigError, match="num.io.threads.*at least 1"):
            cfg.with_dynamic({"num.io.threads": "0"})
        assert cfg["num.io.threads"] == 8


# ----------------------------------------------------------------------------------------------------
# The docker image's configuration: the shipped file plus the ENV the Dockerfile sets.


def _dockerfile_env() -> dict[str, str]:
    text = (REPO / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for item in line[4:].split():
                k, _, v = item.partition("=")
                env[k] = v
    return env


class TestDockerImageConfig:
    def test_image_defaults_load_cleanly(self, caplog: pytest.LogCaptureFixture) -> None:
        env = _dockerfile_env()
        assert env["KAFKA_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092"
        with caplog.at_level(logging.WARNING):
            cfg = load_config(SHIPPED, [], env)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert cfg.listeners == [Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092)]
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9092)]
        assert cfg.log_dirs == [Path("/var/lib/odradek/data")]

    def test_run_time_env_replaces_advertised_host(self) -> None:
        env = {**_dockerfile_env(), "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://kafka.internal:9092"}
        cfg = load_config(SHIPPED, [], env)
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "kafka.internal", 9092)]
        assert cfg.listeners[0].host == "0.0.0.0"

    def test_readme_two_listener_example(self) -> None:
        env = {
            **_dockerfile_env(),
            "KAFKA_LISTENERS": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:29092",
            "KAFKA_ADVERTISED_LISTENERS": "INTERNAL://broker:9092,EXTERNAL://localhost:29092",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
        }
        cfg = load_config(SHIPPED, [], env)
        assert [str(ep) for ep in cfg.listeners] == ["INTERNAL://0.0.0.0:9092", "EXTERNAL://0.0.0.0:29092"]
        assert [str(ep) for ep in cfg.advertised_listeners] == ["INTERNAL://broker:9092", "EXTERNAL://localhost:29092"]

    def test_readme_ssl_listener_example(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # docker/README.md's "TLS and SASL": an SSL listener from the environment alone, PEM files mounted
        # at /etc/odradek/certs (here: a test CA's files in tmp_path).
        from tests.support.certs import TestPki

        pki = TestPki(tmp_path)
        broker = pki.server("broker")
        env = {
            **_dockerfile_env(),
            "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093",
            "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://localhost:9092,SSL://localhost:9093",
            "KAFKA_SSL_KEYSTORE_TYPE": "PEM", "KAFKA_SSL_KEYSTORE_LOCATION": str(broker.keystore_pem),
            "KAFKA_SSL_TRUSTSTORE_TYPE": "PEM", "KAFKA_SSL_TRUSTSTORE_LOCATION": str(pki.ca_pem),
        }
        with caplog.at_level(logging.WARNING):
            cfg = load_config(SHIPPED, [], env)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert cfg.listeners == [Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092), Listener("SSL", "SSL", "0.0.0.0", 9093)]
        assert cfg["ssl.keystore.location"] == str(broker.keystore_pem)


# ----------------------------------------------------------------------------------------------------
# Changing the port (a newcomer's `make run ARGS="--override listeners=..."`)


class TestPortChange:
    def test_changing_only_listeners_moves_the_advertised_address_too(self, caplog) -> None:
        with caplog.at_level(logging.WARNING):
            cfg = load_config(SHIPPED, ["listeners=PLAINTEXT://localhost:9093"], {})
        assert cfg.advertised_listeners == [Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9093)]
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []

    def test_an_advertised_port_other_than_the_listeners_is_warned_about(self, caplog) -> None:
        with caplog.at_level(logging.WARNING):
            load_config(SHIPPED, ["listeners=PLAINTEXT://localhost:9093",
                                  "advertised.listeners=PLAINTEXT://localhost:9092"], {})
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert "advertised.listeners" in warning and "9092" in warning and "9093" in warning

    def test_matching_ports_and_port_zero_are_not_warned_about(self, caplog) -> None:
        with caplog.at_level(logging.WARNING):
            load_config(SHIPPED, ["listeners=PLAINTEXT://0.0.0.0:9093",
                                  "advertised.listeners=PLAINTEXT://broker:9093"], {})
            load_config(SHIPPED, ["listeners=PLAINTEXT://127.0.0.1:0",
                                  "advertised.listeners=PLAINTEXT://localhost:9092"], {})
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


class TestDeliberatePortMapping:
    """odradek.port.mapped.listeners: the listeners whose advertised port differs on purpose (a port
    mapping forwards it). Kafka has no such warning; Odradek keeps it for the likely mistake only."""

    TWO_LISTENERS = ["listeners=INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
                     "advertised.listeners=INTERNAL://broker1:9092,EXTERNAL://localhost:9093",
                     "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                     "inter.broker.listener.name=INTERNAL"]

    def test_a_mapped_listener_is_logged_at_info_not_warned_about(self, caplog) -> None:
        with caplog.at_level(logging.INFO):
            load_config(SHIPPED, [*self.TWO_LISTENERS, "odradek.port.mapped.listeners=EXTERNAL"], {})
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        (info,) = [r.getMessage() for r in caplog.records if "sends clients to" in r.getMessage()]
        assert "localhost:9093" in info and "EXTERNAL" in info and "19092" in info
        assert "deliberate port mapping" in info

    def test_without_the_key_the_same_mapping_is_warned_about_and_the_warning_names_the_key(self, caplog) -> None:
        with caplog.at_level(logging.WARNING):
            load_config(SHIPPED, self.TWO_LISTENERS, {})
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert "EXTERNAL binds port 19092" in warning and "odradek.port.mapped.listeners" in warning

    def test_only_the_named_listeners_are_exempt(self, caplog) -> None:
        with caplog.at_level(logging.WARNING):
            load_config(SHIPPED, ["listeners=INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
                                  "advertised.listeners=INTERNAL://broker1:9094,EXTERNAL://localhost:9093",
                                  "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                                  "inter.broker.listener.name=INTERNAL",
                                  "odradek.port.mapped.listeners=external"], {})  # names are case-blind
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert "broker1:9094" in warning and "INTERNAL binds port 9092" in warning

    def test_a_name_that_is_no_listener_stops_start_up(self) -> None:
        with pytest.raises(ConfigError, match=r"odradek.port.mapped.listeners names EXTRENAL, which listeners "
                                              r"does not define \(it defines INTERNAL, EXTERNAL\)"):
            load_config(SHIPPED, [*self.TWO_LISTENERS, "odradek.port.mapped.listeners=EXTRENAL"], {})

    def test_the_compose_brokers_start_without_the_warning(self, caplog) -> None:
        # docker/compose.yaml's brokers: EXTERNAL binds 19092 in the container and is published on the
        # host as 9092-9094, which each broker advertises - deliberate, so no warning at any start.
        yaml = pytest.importorskip("yaml", reason="pyyaml (the test extra) reads docker/compose.yaml")
        compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
        for name in ("broker1", "broker2", "broker3"):
            env = {**_dockerfile_env(), **{k: str(v) for k, v in compose["services"][name]["environment"].items()}}
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                cfg = load_config(SHIPPED, [], env)
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [], name
            assert [ep.port for ep in cfg.advertised_listeners if ep.name == "EXTERNAL"] == [9091 + int(name[-1])]


class TestBuiltInSingleNode:
    def test_the_built_in_configuration_is_the_shipped_file(self) -> None:
        from odradek.broker.config.broker_config import SINGLE_NODE_DEFAULTS

        assert dict(SINGLE_NODE_DEFAULTS) == dict(load_properties(SHIPPED))

    def test_the_shipped_file_sets_kafkas_single_node_internal_topics_and_every_key_it_names_works(self) -> None:
        # Kafka 4.4's config/server.properties sets these for one node (it also sets the share
        # coordinator's, which Odradek does not serve); the file said transactions were not implemented.
        shipped = load_properties(SHIPPED)
        for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                    "transaction.state.log.min.isr"):
            assert shipped.get(key) == "1", key
        # Every key the file sets or shows commented out is one the broker acts on.
        text = SHIPPED.read_text()
        named = set(re.findall(r"^#?([a-z][a-z0-9_.]+)=", text, re.M))
        assert named >= set(shipped) and {k for k in named if CONFIG_DEFS[k].no_effect} == set()
        assert "not implemented" not in text and "Only the PLAINTEXT" not in text

    def test_no_file_and_no_node_id_runs_the_built_in_single_node(self) -> None:
        cfg = load_config(None, [], {})
        assert cfg.node_id == 1 and cfg.log_dirs == [Path("data/kafka-logs")]
        assert cfg["offsets.topic.replication.factor"] == 1
        # A node.id given anywhere keeps Kafka's own defaults underneath, as before.
        assert load_config(None, ["node.id=2", "log.dirs=/x"], {})["offsets.topic.replication.factor"] == 3
