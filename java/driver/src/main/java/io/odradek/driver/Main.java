package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;

/**
 * The odradek test driver: runs one named scenario with Kafka's Java client and prints the outcome as
 * one JSON line, so Python tests can compare what the real Java client saw.
 *
 * <p>Two ways to call it:
 * <ul>
 *   <li>{@code java -jar odradek-driver.jar SCENARIO '{"bootstrap": "...", ...}'} runs one scenario;</li>
 *   <li>{@code java -jar odradek-driver.jar --serve} reads requests from stdin, one JSON object per line
 *       ({@code {"scenario": "...", ...args}}), and answers each with one JSON line on stdout. A JVM
 *       takes a second or two to start, so tests keep one serving driver per module.</li>
 * </ul>
 *
 * <p>Every answer is {@code {"ok": true, "result": ...}} or {@code {"ok": false, "error_class":
 * "<simple name of the root Kafka exception>", "error": "<message>"}}. Kafka reports broker errors as
 * exceptions wrapped in ExecutionException; the driver unwraps them so tests can assert on Kafka's
 * exception name (e.g. UnknownTopicOrPartitionException). Nothing but answers goes to stdout: the
 * client's logging is routed to slf4j-nop.
 *
 * <p>Single-threaded: each scenario opens its own clients and closes them before answering.
 */
public final class Main {
    static final ObjectMapper JSON = new ObjectMapper();

    interface Scenario {
        Object run(JsonNode args) throws Exception;
    }

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("produce", Producing::produce);
        SCENARIOS.put("consume_assign", Consuming::consumeAssign);
        SCENARIOS.put("consume_subscribe", Consuming::consumeSubscribe);
        SCENARIOS.put("admin", Admin::run);
        SCENARIOS.put("txn_produce", Transactions::produce);
        SCENARIOS.put("txn_fence", Transactions::fence);
        SCENARIOS.put("txn_timeout", Transactions::timeout);
        SCENARIOS.put("end_offsets", Transactions::endOffsetsScenario);
        SCENARIOS.put("txn_copy", Transactions::copy);
        SCENARIOS.put("txn_lso", Transactions::lso);
        SCENARIOS.put("txn_hold", Transactions::hold);
        SCENARIOS.put("ping", args -> Map.of("pong", true));
    }

    private Main() {
    }

    public static void main(String[] argv) throws Exception {
        // Answers are the only thing on stdout; keep anything the JVM or a library prints elsewhere.
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        System.setOut(System.err);
        if (argv.length == 1 && argv[0].equals("--serve")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                out.println(answer(line));
            }
            return;
        }
        if (argv.length < 1 || argv.length > 2) {
            System.err.println("usage: odradek-driver SCENARIO [JSON-ARGS] | --serve; scenarios: " + SCENARIOS.keySet());
            System.exit(2);
        }
        ObjectNode request = argv.length == 2 ? (ObjectNode) JSON.readTree(argv[1]) : JSON.createObjectNode();
        request.put("scenario", argv[0]);
        String reply = answer(JSON.writeValueAsString(request));
        out.println(reply);
        System.exit(JSON.readTree(reply).path("ok").asBoolean() ? 0 : 1);
    }

    static String answer(String line) {
        Map<String, Object> reply = new LinkedHashMap<>();
        try {
            JsonNode request = JSON.readTree(line);
            String name = request.path("scenario").asText("");
            Scenario scenario = SCENARIOS.get(name);
            if (scenario == null) {
                throw new IllegalArgumentException("unknown scenario '" + name + "'; known: " + SCENARIOS.keySet());
            }
            reply.put("ok", true);
            reply.put("result", scenario.run(request));
        } catch (Throwable t) {
            Throwable root = unwrap(t);
            reply.clear();
            reply.put("ok", false);
            reply.put("error_class", root.getClass().getSimpleName());
            reply.put("error", String.valueOf(root.getMessage()));
        }
        try {
            return JSON.writeValueAsString(reply);
        } catch (Exception e) {
            return "{\"ok\": false, \"error_class\": \"JsonProcessingException\", \"error\": \"cannot encode answer\"}";
        }
    }

    /** Kafka's futures wrap the broker's error; the interesting exception is the innermost one. */
    static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException
                || t.getClass() == RuntimeException.class) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }
}
