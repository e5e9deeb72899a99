// The Kafka 4.4 Java client's and Kafka 4.4 tools' steps of the API-surface A/B test
// (tests/integration/test_client_api_surface.py), against one broker after another in one JVM. Run with
// Java's single-file launcher, Kafka's jars (kafka-clients, kafka-tools) on the classpath:
//
//     java -cp <kafka jars> ClientSurface.java LABEL CLIENT_BOOTSTRAP TOOLS_BOOTSTRAP [LABEL ...]
//
// For each group of three arguments, in order:
//
//   the Java client, through CLIENT_BOOTSTRAP (a recording proxy): Admin createTopics, listOffsets (latest;
//   the admin retries until the new topic is led), describeTopics, describeCluster, describeConfigs (the
//   topic and the broker), incrementalAlterConfigs; an idempotent producer (acks=all) sends COUNT records;
//   listOffsets (earliest, max timestamp, by timestamp); a consumer of a classic group (group.protocol
//   classic) reads them, heartbeats for a second, commits and leaves; a consumer of a KIP-848 group
//   (group.protocol consumer) reads them, commits and leaves;
//
//   Kafka's tools, through TOOLS_BOOTSTRAP (another proxy), each tool's main class called in this JVM (the
//   exit Kafka's tools call only records its status, which must be 0): kafka-topics --describe,
//   kafka-consumer-groups --describe of both groups, kafka-features describe.
//
// Names are LABEL-based (topic "surface-LABEL", groups "surface-LABEL-classic" and "-consumer"). stdout:
// the tools' own output and one "done LABEL" line per group; any failure ends it with a stack trace on
// stderr and exit 1.
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.internals.Exit;

public class ClientSurface {
    static final int COUNT = 10;

    /** The status the running tool's last Exit.exit call gave, -1 if none: Kafka's tools call it from
     *  finally blocks, inside their own catch of any Throwable, so it records instead of throwing. */
    static int exitStatus = -1;

    public static void main(String[] args) throws Exception {
        Exit.setExitProcedure((status, message) -> {
            if (exitStatus <= 0) {
                exitStatus = status;
            }
        });
        for (int i = 0; i + 2 < args.length; i += 3) {
            String label = args[i];
            String topic = "surface-" + label;
            javaClient(args[i + 1], topic, topic + "-classic", topic + "-consumer");
            tools(args[i + 2], topic, topic + "-classic", topic + "-consumer");
            System.out.println("done " + label);
        }
    }

    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "client-surface");
        return p;
    }

    static void javaClient(String bootstrap, String topic, String classicGroup, String consumerGroup)
            throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("retention.ms", "-1"))))
                .all().get();
            admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get();
            admin.describeTopics(List.of(topic)).allTopicNames().get();
            Collection<Node> nodes = admin.describeCluster().nodes().get();
            String broker = nodes.iterator().next().idString();
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.describeConfigs(List.of(topicResource, new ConfigResource(ConfigResource.Type.BROKER, broker)))
                .all().get();
            admin.incrementalAlterConfigs(Map.of(topicResource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.bytes", "1048576"), AlterConfigOp.OpType.SET))))
                .all().get();

            Properties pp = props(bootstrap);
            pp.put("enable.idempotence", "true");
            pp.put("acks", "all");
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < COUNT; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i)).get();
                }
            }
            admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get();
            admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get();
            admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(0))).all().get();
        }
        consume(bootstrap, topic, classicGroup, "classic");
        consume(bootstrap, topic, consumerGroup, "consumer");
    }

    static void consume(String bootstrap, String topic, String group, String protocol) {
        Properties cp = props(bootstrap);
        cp.put("group.id", group);
        cp.put("group.protocol", protocol);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        if (protocol.equals("classic")) {
            cp.put("heartbeat.interval.ms", "200");  // Heartbeat sent within the second polled below
        }
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (seen < COUNT) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(group + ": read " + seen + " of " + COUNT + " records in 60 s");
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                seen += records.count();
            }
            long heartbeats = System.nanoTime() + Duration.ofSeconds(1).toNanos();
            while (System.nanoTime() < heartbeats) {
                consumer.poll(Duration.ofMillis(100));
            }
            consumer.commitSync();
        }
    }

    static void tools(String bootstrap, String topic, String classicGroup, String consumerGroup) throws Exception {
        tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic);
        for (String group : List.of(classicGroup, consumerGroup)) {
            tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bootstrap,
                 "--describe", "--group", group);
        }
        tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bootstrap, "describe");
    }

    static void tool(String mainClass, String... args) throws Exception {
        exitStatus = -1;
        Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
        if (exitStatus > 0) {
            throw new IllegalStateException(mainClass + " " + String.join(" ", args) + ": exit " + exitStatus);
        }
    }
}
