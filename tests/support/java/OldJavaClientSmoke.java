import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * An old Java client's whole round trip, written against the kafka-clients 2.1 API only (run with
 * Java's single-file launcher, java/old-java-client's jars alone on the classpath):
 *
 *   java -cp '.cache/jars/old-java-client/*' OldJavaClientSmoke.java BOOTSTRAP TOPIC GROUP COUNT
 *
 * produces COUNT records "key-i"/"value-i" (acks=all) to partition 0 of TOPIC, consumes them back in
 * GROUP (subscribe, a classic group: JoinGroup/SyncGroup), commits synchronously, then a second
 * consumer of GROUP reads the committed offset back (OffsetFetch). One line each on stdout:
 *
 *   produced PARTITION OFFSET
 *   consumed PARTITION OFFSET KEY VALUE
 *   committed PARTITION OFFSET
 *
 * Any exception ends it with its stack trace on stderr and exit 1.
 */
public class OldJavaClientSmoke {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);

        Properties producerProps = new Properties();
        producerProps.put("bootstrap.servers", bootstrap);
        producerProps.put("acks", "all");
        producerProps.put("key.serializer", StringSerializer.class.getName());
        producerProps.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
            for (int i = 0; i < count; i++) {
                RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i)).get();
                System.out.println("produced " + md.partition() + " " + md.offset());
            }
        }

        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
            consumer.subscribe(Collections.singletonList(topic));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (got.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r);
                }
            }
            for (ConsumerRecord<String, String> r : got) {
                System.out.println("consumed " + r.partition() + " " + r.offset() + " " + r.key() + " " + r.value());
            }
            consumer.commitSync();
        }

        // A new member of the group: what it reads is what the broker stored for the group.
        try (KafkaConsumer<String, String> reader = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
            OffsetAndMetadata committed = reader.committed(tp);
            System.out.println("committed " + tp.partition() + " " + (committed == null ? -1 : committed.offset()));
        }
    }

    private static Properties consumerProps(String bootstrap, String group) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        return props;
    }
}
