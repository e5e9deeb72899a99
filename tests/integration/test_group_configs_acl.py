"""Group configs under Kafka's StandardAuthorizer: DescribeConfigs of a GROUP resource needs
DESCRIBE_CONFIGS on the group, AlterConfigs and IncrementalAlterConfigs ALTER_CONFIGS on it (Kafka's
ConfigHelper / ConfigAdminManager), else GROUP_AUTHORIZATION_FAILED (30) - with Kafka's message "Group
authorization failed." for the alterations, none for a description - and nothing changes.

One data dir, three broker runs (on PLAINTEXT every connection is User:ANONYMOUS, made a super user by
restarting with super.users, as tests/integration/test_acl_table.py does):
1. super user: group "locked" gets a config; ANONYMOUS is granted DESCRIBE_CONFIGS on group "seen" and
   ALTER_CONFIGS on group "open" only;
2. no super user: the refusals and the allowed calls;
3. super user: "locked" and "seen" still hold exactly what they held.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.wire import WireClient

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
GROUP_RESOURCE, GROUP_CONFIG = 3, 32
DESCRIBE_CONFIGS, ALTER_CONFIGS = 10, 11
GROUP_AUTH = 30
LIMIT = "share.delivery.count.limit"


def incremental(c: WireClient, group: str, value: str) -> tuple[int, str | None]:
    r = c.request(44, 1, {"validate_only": False, "resources": [{"resource_type": GROUP_CONFIG, "resource_name": group,
                                                                 "configs": [{"name": LIMIT, "config_operation": 0,
                                                                              "value": value}]}]})["responses"][0]
    return r["error_code"], r["error_message"]


def legacy(c: WireClient, group: str, value: str) -> tuple[int, str | None]:
    r = c.request(33, 2, {"validate_only": False, "resources": [{"resource_type": GROUP_CONFIG, "resource_name": group,
                                                                 "configs": [{"name": LIMIT, "value": value}]}]})
    return r["responses"][0]["error_code"], r["responses"][0]["error_message"]


def described(c: WireClient, group: str) -> tuple[int, str | None, list[tuple[str, str]]]:
    r = c.request(32, 4, {"resources": [{"resource_type": GROUP_CONFIG, "resource_name": group,
                                         "configuration_keys": [LIMIT]}]})["results"][0]
    return r["error_code"], r["error_message"], [(e["value"], e["config_source"]) for e in r["configs"]]


def test_group_configs_need_the_groups_config_acls(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "acl"
    base = {"authorizer.class.name": STANDARD}
    b = broker_factory({**base, "super.users": ANON}, data_dir=data)
    with WireClient(b.host, b.port) as c:
        assert incremental(c, "locked", "3") == (0, None)
        assert incremental(c, "seen", "4") == (0, None)
        grants = [("seen", DESCRIBE_CONFIGS), ("open", ALTER_CONFIGS)]
        resp = c.request(30, 3, {"creations": [
            {"resource_type": GROUP_RESOURCE, "resource_name": name, "resource_pattern_type": 3, "principal": ANON,
             "host": "*", "operation": op, "permission_type": 3} for name, op in grants]})
        assert all(r["error_code"] == 0 for r in resp["results"]), resp
    b.stop()

    b = broker_factory(base, data_dir=data)
    with WireClient(b.host, b.port) as c:
        assert described(c, "locked") == (GROUP_AUTH, None, [])
        assert described(c, "seen") == (0, "", [("4", 8)])
        assert incremental(c, "locked", "5") == (GROUP_AUTH, "Group authorization failed.")
        assert legacy(c, "seen", "5") == (GROUP_AUTH, "Group authorization failed.")  # DESCRIBE_CONFIGS only
        assert incremental(c, "open", "6") == (0, None)
        assert described(c, "open") == (0, "", [("6", 8)])  # Kafka's ALTER_CONFIGS implies DESCRIBE_CONFIGS
    b.stop()

    b = broker_factory({**base, "super.users": ANON}, data_dir=data)
    with WireClient(b.host, b.port) as c:
        assert described(c, "locked")[2] == [("3", 8)]
        assert described(c, "seen")[2] == [("4", 8)]
        assert described(c, "open")[2] == [("6", 8)]
    b.stop()
