package io.odradek.driver;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.Iterator;
import java.util.Map;
import java.util.Properties;

/** Reading scenario arguments: required/optional fields and the free-form "config" map of client properties. */
final class Args {
    private Args() {
    }

    static String str(JsonNode args, String name) {
        JsonNode v = args.get(name);
        if (v == null || v.isNull()) {
            throw new IllegalArgumentException("missing argument '" + name + "'");
        }
        return v.asText();
    }

    static String str(JsonNode args, String name, String dflt) {
        JsonNode v = args.get(name);
        return v == null || v.isNull() ? dflt : v.asText();
    }

    static int integer(JsonNode args, String name, int dflt) {
        JsonNode v = args.get(name);
        return v == null || v.isNull() ? dflt : v.asInt();
    }

    static long lng(JsonNode args, String name, long dflt) {
        JsonNode v = args.get(name);
        return v == null || v.isNull() ? dflt : v.asLong();
    }

    static boolean bool(JsonNode args, String name, boolean dflt) {
        JsonNode v = args.get(name);
        return v == null || v.isNull() ? dflt : v.asBoolean();
    }

    /** Base client properties: bootstrap.servers plus anything under "config" (string values). */
    static Properties clientProps(JsonNode args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", str(args, "bootstrap"));
        p.put("client.id", str(args, "client_id", "odradek-driver"));
        JsonNode config = args.get("config");
        if (config != null && config.isObject()) {
            Iterator<Map.Entry<String, JsonNode>> it = config.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                p.put(e.getKey(), e.getValue().asText());
            }
        }
        return p;
    }
}
