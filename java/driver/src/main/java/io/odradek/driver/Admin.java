package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;

/**
 * Scenario "admin": one AdminClient call, chosen by "op".
 *
 * <pre>
 * describe_cluster                                   -> {cluster_id, controller, nodes: [{id, host, port}]}
 * list_topics                                        -> [names, sorted]
 * create_topic   topic, partitions, replication_factor, configs {k: v}  -> {created: topic}
 * delete_topic   topic                               -> {deleted: topic}
 * describe_topics topics [..]                        -> {name: {topic_id, internal, partitions: [{partition, leader, replicas, isr}]}}
 * list_offsets   topic, spec earliest|latest|max_timestamp|{"timestamp": t}, partitions? -> {p: {offset, timestamp, leader_epoch}}
 * describe_configs resource_type topic|broker, name  -> {key: {value, source, read_only, sensitive}}
 * incremental_alter_configs resource_type, name, ops [{name, value, op set|delete|append|subtract}] -> {altered: n}
 * create_partitions topic, total                     -> {total}
 * delete_records topic, before {p: offset}           -> {p: low_watermark}
 * describe_log_dirs broker                           -> {dir: {error, replicas: {"topic-p": size}}}
 * </pre>
 */
final class Admin {
    private Admin() {
    }

    static Object run(JsonNode args) throws Exception {
        Properties p = Args.clientProps(args);
        p.putIfAbsent("request.timeout.ms", "15000");
        p.putIfAbsent("default.api.timeout.ms", "20000");
        try (AdminClient admin = AdminClient.create(p)) {
            String op = Args.str(args, "op");
            switch (op) {
                case "describe_cluster":
                    return describeCluster(admin);
                case "list_topics":
                    return new ArrayList<>(new java.util.TreeSet<>(admin.listTopics().names().get()));
                case "create_topic":
                    return createTopic(admin, args);
                case "delete_topic":
                    admin.deleteTopics(List.of(Args.str(args, "topic"))).all().get();
                    return Map.of("deleted", Args.str(args, "topic"));
                case "describe_topics":
                    return describeTopics(admin, args);
                case "list_offsets":
                    return listOffsets(admin, args);
                case "describe_configs":
                    return describeConfigs(admin, args);
                case "incremental_alter_configs":
                    return alterConfigs(admin, args);
                case "create_partitions":
                    admin.createPartitions(Map.of(Args.str(args, "topic"),
                            NewPartitions.increaseTo(Args.integer(args, "total", 0)))).all().get();
                    return Map.of("total", Args.integer(args, "total", 0));
                case "delete_records":
                    return deleteRecords(admin, args);
                case "describe_log_dirs":
                    return describeLogDirs(admin, args);
                default:
                    throw new IllegalArgumentException("unknown admin op '" + op + "'");
            }
        }
    }

    private static Map<String, Object> node(Node n) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", n.id());
        m.put("host", n.host());
        m.put("port", n.port());
        return m;
    }

    private static Object describeCluster(AdminClient admin) throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("cluster_id", r.clusterId().get());
        Node controller = r.controller().get();
        out.put("controller", controller == null ? null : controller.id());
        List<Object> nodes = new ArrayList<>();
        for (Node n : r.nodes().get()) {
            nodes.add(node(n));
        }
        out.put("nodes", nodes);
        return out;
    }

    private static Object createTopic(AdminClient admin, JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        NewTopic nt = new NewTopic(topic, Optional.of(Args.integer(args, "partitions", 1)),
                Optional.of((short) Args.integer(args, "replication_factor", 1)));
        Map<String, String> configs = new HashMap<>();
        JsonNode c = args.get("configs");
        if (c != null && c.isObject()) {
            c.fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
        }
        nt.configs(configs);
        admin.createTopics(List.of(nt)).all().get();
        return Map.of("created", topic);
    }

    private static Object describeTopics(AdminClient admin, JsonNode args) throws Exception {
        List<String> names = new ArrayList<>();
        args.path("topics").forEach(n -> names.add(n.asText()));
        Map<String, TopicDescription> d = admin.describeTopics(names).allTopicNames().get();
        Map<String, Object> out = new TreeMap<>();
        for (TopicDescription td : d.values()) {
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("partition", pi.partition());
                m.put("leader", pi.leader() == null ? null : pi.leader().id());
                m.put("replicas", pi.replicas().stream().map(Node::id).toList());
                m.put("isr", pi.isr().stream().map(Node::id).toList());
                parts.add(m);
            }
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("topic_id", td.topicId().toString());
            t.put("internal", td.isInternal());
            t.put("partitions", parts);
            out.put(td.name(), t);
        }
        return out;
    }

    private static List<TopicPartition> partitions(AdminClient admin, JsonNode args, String topic) throws Exception {
        List<TopicPartition> tps = new ArrayList<>();
        JsonNode parts = args.get("partitions");
        if (parts != null && parts.isArray()) {
            parts.forEach(n -> tps.add(new TopicPartition(topic, n.asInt())));
        } else {
            for (TopicPartitionInfo pi : admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions()) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
        }
        return tps;
    }

    private static Object listOffsets(AdminClient admin, JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        JsonNode specNode = args.get("spec");
        OffsetSpec spec;
        if (specNode == null || specNode.isNull() || "latest".equals(specNode.asText())) {
            spec = OffsetSpec.latest();
        } else if ("earliest".equals(specNode.asText())) {
            spec = OffsetSpec.earliest();
        } else if ("max_timestamp".equals(specNode.asText())) {
            spec = OffsetSpec.maxTimestamp();
        } else if (specNode.has("timestamp")) {
            spec = OffsetSpec.forTimestamp(specNode.get("timestamp").asLong());
        } else {
            throw new IllegalArgumentException("bad offset spec " + specNode);
        }
        Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
        for (TopicPartition tp : partitions(admin, args, topic)) {
            request.put(tp, spec);
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r = admin.listOffsets(request).all().get();
        Map<String, Object> out = new TreeMap<>();
        r.forEach((tp, info) -> {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("offset", info.offset());
            m.put("timestamp", info.timestamp());
            m.put("leader_epoch", info.leaderEpoch().orElse(null));
            out.put(String.valueOf(tp.partition()), m);
        });
        return out;
    }

    private static ConfigResource resource(JsonNode args) {
        String type = Args.str(args, "resource_type", "topic");
        ConfigResource.Type t = switch (type) {
            case "topic" -> ConfigResource.Type.TOPIC;
            case "broker" -> ConfigResource.Type.BROKER;
            default -> throw new IllegalArgumentException("bad resource_type " + type);
        };
        return new ConfigResource(t, Args.str(args, "name"));
    }

    private static Object describeConfigs(AdminClient admin, JsonNode args) throws Exception {
        ConfigResource res = resource(args);
        Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, Object> out = new TreeMap<>();
        for (ConfigEntry e : config.entries()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("value", e.value());
            m.put("source", e.source().name());
            m.put("read_only", e.isReadOnly());
            m.put("sensitive", e.isSensitive());
            out.put(e.name(), m);
        }
        return out;
    }

    private static Object alterConfigs(AdminClient admin, JsonNode args) throws Exception {
        ConfigResource res = resource(args);
        Collection<AlterConfigOp> ops = new ArrayList<>();
        for (JsonNode o : args.path("ops")) {
            AlterConfigOp.OpType type = AlterConfigOp.OpType.valueOf(o.path("op").asText("set").toUpperCase());
            String value = o.hasNonNull("value") ? o.get("value").asText() : null;
            ops.add(new AlterConfigOp(new ConfigEntry(o.path("name").asText(), value), type));
        }
        admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
        return Map.of("altered", ops.size());
    }

    private static Object deleteRecords(AdminClient admin, JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        Map<TopicPartition, RecordsToDelete> request = new LinkedHashMap<>();
        args.path("before").fields().forEachRemaining(e -> request.put(
                new TopicPartition(topic, Integer.parseInt(e.getKey())), RecordsToDelete.beforeOffset(e.getValue().asLong())));
        Map<String, Object> out = new TreeMap<>();
        for (var e : admin.deleteRecords(request).lowWatermarks().entrySet()) {
            out.put(String.valueOf(e.getKey().partition()), e.getValue().get().lowWatermark());
        }
        return out;
    }

    private static Object describeLogDirs(AdminClient admin, JsonNode args) throws Exception {
        int broker = Args.integer(args, "broker", 1);
        Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get().get(broker);
        Map<String, Object> out = new TreeMap<>();
        dirs.forEach((dir, d) -> {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("error", d.error() == null ? null : d.error().getClass().getSimpleName());
            Map<String, Long> replicas = new TreeMap<>();
            d.replicaInfos().forEach((tp, info) -> replicas.put(tp.toString(), info.size()));
            m.put("replicas", replicas);
            out.put(dir, m);
        });
        return out;
    }
}
