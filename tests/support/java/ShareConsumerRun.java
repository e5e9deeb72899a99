import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One Kafka 4.4 KafkaShareConsumer (tests/support/share_consumer.py runs it with Java's single-file
 * launcher, Kafka's jars on the classpath).
 *
 * <p>Arguments: bootstrap group topic mode action [client-id]. mode is "implicit" or "explicit"
 * (share.acknowledgement.mode). action, per record, in explicit mode: "accept"; "release-first"
 * (RELEASE on its first delivery, ACCEPT after); "reject-odd" (REJECT records whose value ends in an
 * odd digit, ACCEPT the others); "release" (always RELEASE); "hold" (acknowledge nothing and stop
 * polling once a poll returned a record that is not a probe, so their locks must expire or the
 * process be killed). Probes (values starting "probe", which tests send until every partition has
 * delivered one) are always accepted. "count" (implicit mode, for bench/share_consumer_bench.py): no line
 * per record, "P partition" the first time a partition delivers and "C total firstMillis lastMillis"
 * at most every 200 ms and at the end.
 *
 * <p>Prints one line per record as it arrives: "R partition offset deliveryCount value", "S" once
 * subscribed, and "E class message" on an error. It stops, committing (explicit) and closing the
 * consumer (which releases what it still holds), when a line "stop" arrives on stdin.
 */
public final class ShareConsumerRun {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        String topic = args[2];
        String mode = args[3];
        String action = args[4];
        String clientId = args.length > 5 ? args[5] : "share-test";
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", clientId);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("share.acknowledgement.mode", mode);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("stop")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // stdin gone: stop as well
            }
            stop.set(true);
        });
        reader.setDaemon(true);
        reader.start();
        boolean holding = false;
        boolean counting = action.equals("count");
        long total = 0;
        long firstAt = 0;
        long lastAt = 0;
        long printedAt = 0;
        Set<Integer> seenPartitions = new HashSet<>();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            System.out.println("S");
            System.out.flush();
            while (!stop.get()) {
                if (holding) {
                    Thread.sleep(100);
                    continue;
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (counting) {
                    long now = System.currentTimeMillis();
                    if (!records.isEmpty()) {
                        total += records.count();
                        firstAt = firstAt == 0 ? now : firstAt;
                        lastAt = now;
                        for (ConsumerRecord<String, String> r : records) {
                            if (seenPartitions.add(r.partition())) {
                                System.out.println("P " + r.partition());
                            }
                        }
                    }
                    if (now - printedAt >= 200) {
                        System.out.println("C " + total + " " + firstAt + " " + lastAt);
                        System.out.flush();
                        printedAt = now;
                    }
                    continue;
                }
                for (ConsumerRecord<String, String> r : records) {
                    short count = r.deliveryCount().orElse((short) -1);
                    System.out.println("R " + r.partition() + " " + r.offset() + " " + count + " " + r.value());
                    if (mode.equals("explicit") && !action.equals("hold")) {
                        consumer.acknowledge(r, isProbe(r) ? AcknowledgeType.ACCEPT : typeFor(action, r, count));
                    } else if (action.equals("hold") && !isProbe(r)) {
                        holding = true;
                    }
                }
                System.out.flush();
                if (action.equals("hold") && !holding) {
                    for (ConsumerRecord<String, String> r : records) {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                    if (!records.isEmpty()) {
                        consumer.commitSync();
                    }
                } else if (mode.equals("explicit") && !holding && !records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        } catch (Exception e) {
            System.out.println("E " + e.getClass().getSimpleName() + " " + e.getMessage());
        }
        if (counting) {
            System.out.println("C " + total + " " + firstAt + " " + lastAt);
        }
        System.out.println("X");
        System.out.flush();
    }

    static boolean isProbe(ConsumerRecord<String, String> r) {
        return r.value() != null && r.value().startsWith("probe");
    }

    static AcknowledgeType typeFor(String action, ConsumerRecord<String, String> r, short count) {
        switch (action) {
            case "release-first":
                return count <= 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
            case "release":
                return AcknowledgeType.RELEASE;
            case "reject-odd":
                char last = r.value().charAt(r.value().length() - 1);
                return (last - '0') % 2 == 1 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
            default:
                return AcknowledgeType.ACCEPT;
        }
    }
}
