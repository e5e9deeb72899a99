package io.odradek.driver;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A Kafka Streams exactly_once_v2 application for the tests (its own process, so a test can SIGKILL it):
 * it counts the records of each key of the input topic - through a repartition topic (groupBy) and a
 * state store whose changelog topic Streams restores after a crash - and writes every new count to the
 * output topic as "key -> count". Under exactly-once, a read_committed reader of the output sees each
 * key's counts 1, 2, ..., n exactly once and in order, whatever crashed meanwhile: a record processed
 * twice would repeat a count or skip one.
 *
 * <p>Arguments: bootstrap servers, application id, input topic, output topic, state directory,
 * replication factor of the internal topics, and optionally the group protocol ("classic", the
 * default, or "streams": KIP-1071's streams group, where the broker assigns the tasks and creates
 * the internal topics). Caching is off (every update is written) and the commit
 * interval is 100 ms. It prints one line per state change of the application ("state RUNNING") and
 * runs until SIGTERM (a clean close) or SIGKILL.
 */
public final class StreamsEos {
    private StreamsEos() {
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0];
        String input = argv[2];
        String output = argv[3];
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, argv[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, argv[4]);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, argv[5]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (argv.length > 6) {
            p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, argv[6]);
        }
        // First line of the output: which protocol this run uses (a test checks it ran the one it asked for).
        System.out.println("group.protocol " + p.getOrDefault(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic"));
        System.out.flush();

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupBy((key, value) -> key, Grouped.with("by-key", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .map((key, count) -> KeyValue.pair(key, key + " -> " + count))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch closed = new CountDownLatch(1);
        // KafkaStreams calls the listener after it released its state lock, so close() can return (and
        // the JVM exit) before "state NOT_RUNNING" is printed; the shutdown hook waits for the line.
        CountDownLatch notRunningPrinted = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.NOT_RUNNING) {
                notRunningPrinted.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("uncaught " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            try {
                notRunningPrinted.await(10, TimeUnit.SECONDS);  // not reached after an ERROR state
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }
}
