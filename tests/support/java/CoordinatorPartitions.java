// Kafka's coordinator partition of a group id or transactional id, computed by Kafka's own code:
// GroupCoordinatorService.partitionFor and TransactionStateManager.partitionFor are both
// Utils.abs(id.hashCode()) % partitions (Utils from kafka-clients on the classpath, String.hashCode
// from the JDK). Run with Java's single-file launcher (tests/support/java_partitions.py does):
//
//     java -cp <kafka jars> CoordinatorPartitions.java 50 5 3 < ids
//
// stdin: one id per line, as the hex of its UTF-16 code units (so any id, astral characters
// included, arrives exactly as the Java String it is). stdout: one line per id,
// "<hashCode> <partition for each count given as an argument>".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

public class CoordinatorPartitions {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String hex = line.trim();
            char[] units = new char[hex.length() / 4];
            for (int i = 0; i < units.length; i++) {
                units[i] = (char) Integer.parseInt(hex.substring(4 * i, 4 * i + 4), 16);
            }
            String id = new String(units);
            out.append(id.hashCode());
            for (String count : args) {
                out.append(' ').append(Utils.abs(id.hashCode()) % Integer.parseInt(count));
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
