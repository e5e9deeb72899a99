package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;

/**
 * Scenario "produce": send records with KafkaProducer and report where each landed.
 *
 * <p>Arguments: bootstrap, topic; either "records" (a list of {key, value, headers: {k: v}, partition,
 * timestamp}; strings, null allowed for key/value) or "count" generated records with value
 * "{value_prefix}{i}", key "{key_prefix}{i % key_mod}" when key_prefix is given, and headers
 * {seq: i, src: driver} when headers=true. Optional: partition (fixed), timestamp (base; record i gets
 * base+i), compression (none|gzip|snappy|lz4|zstd), idempotent (default true), acks (default all),
 * linger_ms, transactional_id (the whole send becomes one committed transaction), config (extra props).
 *
 * <p>Result: {sent, partitions: {p: {first, last, count}}, offsets: [[p, offset, timestamp], ...]} —
 * offsets only when fewer than 10,000 records, to keep answers small.
 */
final class Producing {
    private Producing() {
    }

    static Object produce(JsonNode args) throws Exception {
        Properties p = Args.clientProps(args);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, Args.str(args, "compression", "none"));
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(Args.bool(args, "idempotent", true)));
        p.put(ProducerConfig.ACKS_CONFIG, Args.str(args, "acks", "all"));
        p.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(Args.integer(args, "linger_ms", 5)));
        p.putIfAbsent(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.putIfAbsent(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.putIfAbsent(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        String txId = Args.str(args, "transactional_id", null);
        if (txId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId);
        }
        String topic = Args.str(args, "topic");
        List<ProducerRecord<byte[], byte[]>> records = buildRecords(args, topic);

        List<Future<RecordMetadata>> futures = new ArrayList<>(records.size());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            if (txId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (ProducerRecord<byte[], byte[]> r : records) {
                futures.add(producer.send(r));
            }
            if (txId != null) {
                producer.commitTransaction();
            } else {
                producer.flush();
            }
            Map<Integer, long[]> perPartition = new TreeMap<>();
            List<List<Long>> offsets = new ArrayList<>();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get();
                long[] s = perPartition.computeIfAbsent(md.partition(), k -> new long[]{Long.MAX_VALUE, -1, 0});
                s[0] = Math.min(s[0], md.offset());
                s[1] = Math.max(s[1], md.offset());
                s[2]++;
                if (records.size() < 10_000) {
                    offsets.add(List.of((long) md.partition(), md.offset(), md.timestamp()));
                }
            }
            Map<String, Object> parts = new LinkedHashMap<>();
            perPartition.forEach((k, s) -> parts.put(String.valueOf(k), Map.of("first", s[0], "last", s[1], "count", s[2])));
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("sent", futures.size());
            result.put("partitions", parts);
            result.put("offsets", offsets);
            return result;
        }
    }

    private static byte[] bytes(JsonNode v) {
        return v == null || v.isNull() ? null : v.asText().getBytes(StandardCharsets.UTF_8);
    }

    static List<ProducerRecord<byte[], byte[]>> buildRecords(JsonNode args, String topic) {
        List<ProducerRecord<byte[], byte[]>> out = new ArrayList<>();
        Integer fixedPartition = args.hasNonNull("partition") ? args.get("partition").asInt() : null;
        Long baseTs = args.hasNonNull("timestamp") ? args.get("timestamp").asLong() : null;
        JsonNode explicit = args.get("records");
        if (explicit != null && explicit.isArray()) {
            for (JsonNode r : explicit) {
                RecordHeaders headers = new RecordHeaders();
                JsonNode h = r.get("headers");
                if (h != null && h.isObject()) {
                    h.fields().forEachRemaining(e -> headers.add(e.getKey(), bytes(e.getValue())));
                }
                Integer partition = r.hasNonNull("partition") ? Integer.valueOf(r.get("partition").asInt()) : fixedPartition;
                Long ts = r.hasNonNull("timestamp") ? Long.valueOf(r.get("timestamp").asLong()) : baseTs;
                out.add(new ProducerRecord<>(topic, partition, ts, bytes(r.get("key")), bytes(r.get("value")), headers));
            }
            return out;
        }
        int count = Args.integer(args, "count", 0);
        String keyPrefix = Args.str(args, "key_prefix", null);
        int keyMod = Math.max(1, Args.integer(args, "key_mod", Integer.MAX_VALUE));
        String valuePrefix = Args.str(args, "value_prefix", "v");
        int pad = Args.integer(args, "value_size", 0);
        boolean withHeaders = Args.bool(args, "headers", false);
        for (int i = 0; i < count; i++) {
            byte[] key = keyPrefix == null ? null : (keyPrefix + (i % keyMod)).getBytes(StandardCharsets.UTF_8);
            StringBuilder value = new StringBuilder(valuePrefix).append(i);
            while (value.length() < pad) {
                value.append('.');
            }
            RecordHeaders headers = new RecordHeaders();
            if (withHeaders) {
                headers.add("seq", String.valueOf(i).getBytes(StandardCharsets.UTF_8));
                headers.add("src", "driver".getBytes(StandardCharsets.UTF_8));
            }
            Long ts = baseTs == null ? null : baseTs + i;
            out.add(new ProducerRecord<>(topic, fixedPartition, ts, key,
                    value.toString().getBytes(StandardCharsets.UTF_8), headers));
        }
        return out;
    }
}
