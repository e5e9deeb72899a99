package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;

/**
 * Transactional scenarios with KafkaProducer, one outcome per call (records are built as in "produce":
 * "records" or "count" + "value_prefix", optional "partition").
 *
 * <ul>
 *   <li>txn_produce — transactional_id, topic, commit (default true): one transaction, committed or
 *       aborted. Result {committed, sent, offsets: [[partition, offset], ...]}.</li>
 *   <li>txn_fence — transactional_id, topic, count: producer A sends count records "a{i}" in an open
 *       transaction; producer B initialises the same id (fencing A), then A tries to commit and B sends
 *       count records "b{i}" and commits. Result {first_error, second_committed}.</li>
 *   <li>txn_timeout — transactional_id, topic, count, transaction_timeout_ms, wait_ms: sends count
 *       records in a transaction, then waits (at most wait_ms) until the broker aborted it — the
 *       read_committed end offset (the LSO) reaches the log end — and only then commits. Result
 *       {aborted_seen, waited_ms, end_offsets, stable_offsets, commit_error}.</li>
 *   <li>txn_lso — transactional_id, topic, count: sends count records "o{i}" in a transaction and, while it
 *       is open, reads the end offsets under both isolation levels; commits, reads them again. Result
 *       {open: {read_committed, read_uncommitted}, committed: {read_committed, read_uncommitted}}.</li>
 *   <li>end_offsets — topic, isolation_level: endOffsets of every partition under that level.</li>
 *   <li>txn_copy — transactional_id, input, output, group, batch, abort_first: a consume-transform-produce
 *       loop over partition 0 of input (a read_committed consumer of the group, assigned) that copies
 *       each record to output with "-out" appended, one transaction per poll of at most batch records,
 *       its offsets committed with sendOffsetsToTransaction. The first abort_first transactions are
 *       aborted and the consumer rewinds to the group's committed offset, as an application would.
 *       Result {committed_txns, aborted_txns, position, committed_offset}.</li>
 *   <li>txn_hold — transactional_id, topic, partitions, count, release_file, wait_ms, then: one transaction
 *       sends count records "h{i}" (partition i % partitions) and, once they are acknowledged, waits until
 *       release_file exists (at most wait_ms: the test moves the coordinator meanwhile), then sends count
 *       records "r{i}" and commits; then `then` more transactions of count records "n{t}-{i}", each
 *       committed. Result {held_ms, transactions, sent, error}: error is null, or the first exception.</li>
 * </ul>
 *
 * <p>Errors are reported as {class, root_class, message}: the class the Java client threw (what an
 * application catches) and the innermost cause.
 */
final class Transactions {
    private Transactions() {
    }

    private static Properties producerProps(JsonNode args, String transactionalId) {
        Properties p = Args.clientProps(args);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.putIfAbsent(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.putIfAbsent(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.putIfAbsent(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return p;
    }

    private static Map<String, Object> error(Throwable t) {
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("class", t.getClass().getSimpleName());
        e.put("root_class", root.getClass().getSimpleName());
        e.put("message", String.valueOf(t.getMessage()));
        return e;
    }

    private static List<Future<RecordMetadata>> sendAll(KafkaProducer<byte[], byte[]> producer,
                                                        List<ProducerRecord<byte[], byte[]>> records) {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (ProducerRecord<byte[], byte[]> r : records) {
            futures.add(producer.send(r));
        }
        producer.flush();
        return futures;
    }

    static Object produce(JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        boolean commit = Args.bool(args, "commit", true);
        List<ProducerRecord<byte[], byte[]>> records = Producing.buildRecords(args, topic);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                producerProps(args, Args.str(args, "transactional_id")))) {
            producer.initTransactions();
            producer.beginTransaction();
            List<Future<RecordMetadata>> futures = sendAll(producer, records);
            List<List<Long>> offsets = new ArrayList<>();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get();
                offsets.add(List.of((long) md.partition(), md.offset()));
            }
            if (commit) {
                producer.commitTransaction();
            } else {
                producer.abortTransaction();
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("committed", commit);
            result.put("sent", futures.size());
            result.put("offsets", offsets);
            return result;
        }
    }

    private static List<ProducerRecord<byte[], byte[]>> generated(JsonNode args, String topic, String prefix) {
        List<ProducerRecord<byte[], byte[]>> out = new ArrayList<>();
        Integer partition = args.hasNonNull("partition") ? args.get("partition").asInt() : null;
        for (int i = 0; i < Args.integer(args, "count", 1); i++) {
            out.add(new ProducerRecord<>(topic, partition, null, (prefix + i).getBytes()));
        }
        return out;
    }

    static Object fence(JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        String txId = Args.str(args, "transactional_id");
        Map<String, Object> result = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> first = new KafkaProducer<>(producerProps(args, txId))) {
            first.initTransactions();
            first.beginTransaction();
            sendAll(first, generated(args, topic, "a"));
            try (KafkaProducer<byte[], byte[]> second = new KafkaProducer<>(producerProps(args, txId))) {
                second.initTransactions();  // bumps the epoch: the first producer is fenced
                try {
                    first.commitTransaction();
                    result.put("first_error", null);
                } catch (Exception e) {
                    result.put("first_error", error(e));
                }
                second.beginTransaction();
                List<Future<RecordMetadata>> futures = sendAll(second, generated(args, topic, "b"));
                second.commitTransaction();
                result.put("second_committed", futures.size());
            }
        }
        return result;
    }

    static Map<String, Long> endOffsets(JsonNode args, String topic, String isolation) {
        Properties p = Args.clientProps(args);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            consumer.partitionsFor(topic, Duration.ofSeconds(15))
                    .forEach(pi -> tps.add(new TopicPartition(topic, pi.partition())));
            Map<String, Long> out = new TreeMap<>();
            consumer.endOffsets(tps, Duration.ofSeconds(15))
                    .forEach((tp, off) -> out.put(String.valueOf(tp.partition()), off));
            return out;
        }
    }

    static Object endOffsetsScenario(JsonNode args) {
        return endOffsets(args, Args.str(args, "topic"), Args.str(args, "isolation_level", "read_uncommitted"));
    }

    static Object timeout(JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        Properties p = producerProps(args, Args.str(args, "transactional_id"));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(Args.integer(args, "transaction_timeout_ms", 1000)));
        long waitMs = Args.lng(args, "wait_ms", 30000);
        Map<String, Object> result = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            sendAll(producer, generated(args, topic, "t"));
            long start = System.currentTimeMillis();
            boolean aborted = false;
            Map<String, Long> ends = Map.of();
            Map<String, Long> stable = Map.of();
            while (!aborted && System.currentTimeMillis() - start < waitMs) {
                Thread.sleep(250);
                ends = endOffsets(args, topic, "read_uncommitted");
                stable = endOffsets(args, topic, "read_committed");
                // The abort marker lands after the records, and then nothing holds the LSO back.
                aborted = ends.equals(stable) && ends.values().stream().mapToLong(Long::longValue).sum()
                        > Args.integer(args, "count", 1);
            }
            result.put("aborted_seen", aborted);
            result.put("waited_ms", System.currentTimeMillis() - start);
            result.put("end_offsets", ends);
            result.put("stable_offsets", stable);
            try {
                producer.commitTransaction();
                result.put("commit_error", null);
            } catch (Exception e) {
                result.put("commit_error", error(e));
            }
        }
        return result;
    }

    static Object copy(JsonNode args) throws Exception {
        String input = Args.str(args, "input");
        String output = Args.str(args, "output");
        int batch = Args.integer(args, "batch", 5);
        int abortsLeft = Args.integer(args, "abort_first", 1);
        Properties cp = Args.clientProps(args);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, Args.str(args, "group"));
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(batch));
        TopicPartition tp = new TopicPartition(input, 0);
        int committedTxns = 0;
        int abortedTxns = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                     producerProps(args, Args.str(args, "transactional_id")))) {
            consumer.assign(List.of(tp));
            producer.initTransactions();
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + Args.lng(args, "timeout_ms", 30000);
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(200));
                if (polled.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                long next = -1;
                for (ConsumerRecord<byte[], byte[]> r : polled) {
                    byte[] value = (new String(r.value()) + "-out").getBytes();
                    producer.send(new ProducerRecord<>(output, 0, r.key(), value));
                    next = r.offset() + 1;
                }
                producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(next)), consumer.groupMetadata());
                if (abortsLeft > 0) {
                    // Sent first, so the aborted copy is in the log and read_committed must skip it:
                    // abortTransaction drops batches still unsent without writing them.
                    producer.flush();
                    producer.abortTransaction();
                    abortsLeft--;
                    abortedTxns++;
                    OffsetAndMetadata committed = consumer.committed(Set.of(tp)).get(tp);
                    consumer.seek(tp, committed == null ? 0 : committed.offset());
                } else {
                    producer.commitTransaction();
                    committedTxns++;
                }
            }
            OffsetAndMetadata committed = consumer.committed(Set.of(tp)).get(tp);
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("committed_txns", committedTxns);
            result.put("aborted_txns", abortedTxns);
            result.put("position", consumer.position(tp));
            result.put("committed_offset", committed == null ? null : committed.offset());
            return result;
        }
    }

    static Object hold(JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        int partitions = Args.integer(args, "partitions", 1);
        int count = Args.integer(args, "count", 1);
        Path release = Path.of(Args.str(args, "release_file"));
        long waitMs = Args.lng(args, "wait_ms", 60000);
        int then = Args.integer(args, "then", 0);
        Map<String, Object> result = new LinkedHashMap<>();
        int sent = 0;
        int transactions = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                producerProps(args, Args.str(args, "transactional_id")))) {
            producer.initTransactions();
            producer.beginTransaction();
            for (Future<RecordMetadata> f : sendAll(producer, spread(topic, partitions, count, "h"))) {
                f.get();
                sent++;
            }
            long start = System.currentTimeMillis();
            while (!Files.exists(release) && System.currentTimeMillis() - start < waitMs) {
                Thread.sleep(50);
            }
            result.put("held_ms", System.currentTimeMillis() - start);
            for (Future<RecordMetadata> f : sendAll(producer, spread(topic, partitions, count, "r"))) {
                f.get();
                sent++;
            }
            producer.commitTransaction();
            transactions++;
            for (int t = 0; t < then; t++) {
                producer.beginTransaction();
                for (Future<RecordMetadata> f : sendAll(producer, spread(topic, partitions, count, "n" + t + "-"))) {
                    f.get();
                    sent++;
                }
                producer.commitTransaction();
                transactions++;
            }
            result.put("error", null);
        } catch (Exception e) {
            result.put("error", error(e));
        }
        result.put("transactions", transactions);
        result.put("sent", sent);
        return result;
    }

    private static List<ProducerRecord<byte[], byte[]>> spread(String topic, int partitions, int count, String prefix) {
        List<ProducerRecord<byte[], byte[]>> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            out.add(new ProducerRecord<>(topic, i % partitions, null, (prefix + i).getBytes()));
        }
        return out;
    }

    static Object lso(JsonNode args) throws Exception {
        String topic = Args.str(args, "topic");
        Map<String, Object> result = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                producerProps(args, Args.str(args, "transactional_id")))) {
            producer.initTransactions();
            producer.beginTransaction();
            sendAll(producer, generated(args, topic, "o"));
            result.put("open", Map.of("read_committed", endOffsets(args, topic, "read_committed"),
                    "read_uncommitted", endOffsets(args, topic, "read_uncommitted")));
            producer.commitTransaction();
            result.put("committed", Map.of("read_committed", endOffsets(args, topic, "read_committed"),
                    "read_uncommitted", endOffsets(args, topic, "read_uncommitted")));
        }
        return result;
    }
}
