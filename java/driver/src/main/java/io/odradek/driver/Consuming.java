package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;

/**
 * Scenarios "consume_assign" and "consume_subscribe": read records with KafkaConsumer.
 *
 * <p>consume_assign — bootstrap, topic, partitions (list; default all partitions from metadata),
 * seek: "earliest" | "latest" | {partition: offset}, max_records, timeout_ms. No group.
 *
 * <p>consume_subscribe — bootstrap, topic, group, group_protocol (classic | consumer), max_records,
 * timeout_ms, commit (commitSync after polling; default true), auto_offset_reset (default earliest).
 *
 * <p>Both stop when max_records were read or timeout_ms passed. Result: {count, records: [{partition,
 * offset, timestamp, key, value, headers: [[k, v], ...]}], positions: {p: next offset}} and, for
 * subscribe, committed: {p: offset}. Records are listed only when fewer than 10,000 (plus "values_sha"
 * is not computed: tests compare records directly on small data).
 */
final class Consuming {
    private Consuming() {
    }

    private static Properties consumerProps(JsonNode args) {
        Properties p = Args.clientProps(args);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.putIfAbsent(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.putIfAbsent(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    static Object consumeAssign(JsonNode args) {
        Properties p = consumerProps(args);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        String topic = Args.str(args, "topic");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            JsonNode parts = args.get("partitions");
            if (parts != null && parts.isArray()) {
                parts.forEach(n -> tps.add(new TopicPartition(topic, n.asInt())));
            } else {
                consumer.partitionsFor(topic, Duration.ofSeconds(15))
                        .forEach(pi -> tps.add(new TopicPartition(topic, pi.partition())));
            }
            consumer.assign(tps);
            JsonNode seek = args.get("seek");
            if (seek == null || seek.isNull() || "earliest".equals(seek.asText())) {
                consumer.seekToBeginning(tps);
            } else if ("latest".equals(seek.asText())) {
                consumer.seekToEnd(tps);
            } else if (seek.isObject()) {
                seek.fields().forEachRemaining(e ->
                        consumer.seek(new TopicPartition(topic, Integer.parseInt(e.getKey())), e.getValue().asLong()));
            }
            Map<String, Object> result = poll(consumer, args);
            Map<String, Long> positions = new TreeMap<>();
            for (TopicPartition tp : tps) {
                positions.put(String.valueOf(tp.partition()), consumer.position(tp));
            }
            result.put("positions", positions);
            return result;
        }
    }

    static Object consumeSubscribe(JsonNode args) {
        Properties p = consumerProps(args);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, Args.str(args, "group"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, Args.str(args, "group_protocol", "classic"));
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, Args.str(args, "auto_offset_reset", "earliest"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        String topic = Args.str(args, "topic");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            Map<String, Object> result = poll(consumer, args);
            Set<TopicPartition> assigned = consumer.assignment();
            Map<String, Long> positions = new TreeMap<>();
            for (TopicPartition tp : assigned) {
                positions.put(String.valueOf(tp.partition()), consumer.position(tp));
            }
            result.put("positions", positions);
            if (Args.bool(args, "commit", true)) {
                consumer.commitSync();
            }
            Map<String, Long> committed = new TreeMap<>();
            Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(assigned);
            c.forEach((tp, om) -> committed.put(String.valueOf(tp.partition()), om == null ? null : om.offset()));
            result.put("committed", committed);
            result.put("assignment", assigned.stream().map(TopicPartition::partition).sorted().toList());
            return result;
        }
    }

    private static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    private static Map<String, Object> poll(KafkaConsumer<byte[], byte[]> consumer, JsonNode args) {
        int max = Args.integer(args, "max_records", Integer.MAX_VALUE);
        long deadline = System.currentTimeMillis() + Args.lng(args, "timeout_ms", 15000);
        List<Map<String, Object>> records = new ArrayList<>();
        int count = 0;
        while (count < max && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                count++;
                if (records.size() < 10_000) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("partition", r.partition());
                    m.put("offset", r.offset());
                    m.put("timestamp", r.timestamp());
                    m.put("timestamp_type", r.timestampType().name);
                    m.put("key", text(r.key()));
                    m.put("value", text(r.value()));
                    List<List<String>> headers = new ArrayList<>();
                    for (Header h : r.headers()) {
                        headers.add(java.util.Arrays.asList(h.key(), text(h.value())));
                    }
                    m.put("headers", headers);
                    records.add(m);
                }
            }
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("count", count);
        result.put("records", records);
        return result;
    }
}
