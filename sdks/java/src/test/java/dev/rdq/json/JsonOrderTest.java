package dev.rdq.json;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class JsonOrderTest {
    private static final String ASTRAL = "\uD83D\uDE00"; // U+1F600, after U+E000 in code point order
    private static final String PRIVATE = "\uE000";

    @Test
    @DisplayName("members are written in code point order however the keys arrive, also past U+D800")
    void code_point_order() throws Exception {
        String want = "{\"a\":1,\"b\":2,\"" + PRIVATE + "\":3,\"" + ASTRAL + "\":4}";
        for (List<String> order : List.of(
                List.of("a", "b", ASTRAL, PRIVATE),
                List.of(ASTRAL, "b", PRIVATE, "a"),
                List.of("b", PRIVATE, "a", ASTRAL),
                List.of(PRIVATE, ASTRAL, "a", "b"))) {
            StringBuilder doc = new StringBuilder("{");
            Map<String, Integer> values = Map.of("a", 1, "b", 2, PRIVATE, 3, ASTRAL, 4);
            for (String k : order) {
                doc.append(doc.length() > 1 ? "," : "").append('"').append(k).append("\":").append(values.get(k));
            }
            JsonValue v = Json.parse(doc.append('}').toString());
            assertEquals(want, Json.writeString(v), order.toString());
            JsonObject o = (JsonObject) v;
            for (String k : order) {
                assertEquals(String.valueOf(values.get(k)), o.get(k).orElseThrow().toString(), k);
            }
            // Built from a map rather than parsed: the same order.
            assertEquals(want, Json.writeString(JsonObject.of(o.members())));
            assertEquals(want, Json.writeString(JsonObject.of(new java.util.HashMap<>(o.members()))));
        }
        // Without keys past U+D800, String order and code point order agree.
        assertEquals("{\"A\":1,\"_\":2,\"a\":3,\"\u00e9\":4}", Json.writeString(Json.parse("{\"\u00e9\":4,\"a\":3,\"_\":2,\"A\":1}")));
    }
}
