// Replica placements computed by Kafka's own placer: org.apache.kafka.metadata.placement.
// StripedReplicaPlacer from kafka-metadata-4.4.0.jar, over new java.util.Random(seed), fed its
// brokers from a HashMap<Integer, UsableBroker> filled in the given order, as Kafka's
// BrokerHeartbeatManager feeds it from its HashMap of registered brokers. Run with Java's
// single-file launcher (tests/support/java_placement.py does):
//
//     java -cp <kafka jars> StripedPlacements.java < cases
//
// stdin, one case after another:
//     case <seed>
//     broker <id> <rack> <fenced: 0|1>     rack: "-" for none, else "r" + the hex of its UTF-16 units
//     place <partitions> <replication factor>   (several: one placer, one Random, as a controller)
//     end
// stdout: for each place line "ok" and one comma-separated replica list per partition, or
// "error " and the InvalidReplicationFactorException's message; "end" after each case.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.metadata.placement.ClusterDescriber;
import org.apache.kafka.metadata.placement.PartitionAssignment;
import org.apache.kafka.metadata.placement.PlacementSpec;
import org.apache.kafka.metadata.placement.StripedReplicaPlacer;
import org.apache.kafka.metadata.placement.UsableBroker;

public class StripedPlacements {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        // A new map per case: a cleared HashMap would keep the capacity an earlier case grew it to.
        HashMap<Integer, UsableBroker>[] brokers = new HashMap[] {new HashMap<Integer, UsableBroker>()};
        StripedReplicaPlacer placer = null;
        ClusterDescriber cluster = new ClusterDescriber() {
            @Override
            public Iterator<UsableBroker> usableBrokers() {
                return brokers[0].values().iterator();
            }

            @Override
            public Uuid defaultDir(int brokerId) {
                return Uuid.ZERO_UUID;
            }
        };
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "case":
                    brokers[0] = new HashMap<>();
                    placer = new StripedReplicaPlacer(new Random(Long.parseLong(f[1])));
                    break;
                case "broker":
                    int id = Integer.parseInt(f[1]);
                    brokers[0].put(id, new UsableBroker(id, rack(f[2]), f[3].equals("1")));
                    break;
                case "place":
                    try {
                        List<PartitionAssignment> placed = placer.place(new PlacementSpec(
                            0, Integer.parseInt(f[1]), Short.parseShort(f[2])), cluster).assignments();
                        out.append("ok");
                        for (PartitionAssignment p : placed) {
                            out.append(' ');
                            for (int i = 0; i < p.replicas().size(); i++) {
                                out.append(i == 0 ? "" : ",").append(p.replicas().get(i));
                            }
                        }
                    } catch (InvalidReplicationFactorException e) {
                        out.append("error ").append(e.getMessage());
                    }
                    out.append('\n');
                    break;
                case "end":
                    out.append("end\n");
                    break;
                default:
                    throw new IllegalArgumentException(line);
            }
        }
        System.out.print(out);
    }

    private static Optional<String> rack(String field) {
        if (field.equals("-")) return Optional.empty();
        String hex = field.substring(1);
        char[] units = new char[hex.length() / 4];
        for (int i = 0; i < units.length; i++) {
            units[i] = (char) Integer.parseInt(hex.substring(4 * i, 4 * i + 4), 16);
        }
        return Optional.of(new String(units));
    }
}
