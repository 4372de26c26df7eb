package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rdq.json.Json;
import dev.rdq.json.JsonArray;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonValue;
import dev.rdq.support.Repo;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Runs every case of {@code compliance/fixtures} (read at test time, so new
 * fixtures are covered as they are added) as its README prescribes.
 */
@DisplayName("compliance fixtures")
class FixturesTest {
    private static final Path DIR = Repo.fixtures();

    static JsonObject manifest() throws Exception {
        return (JsonObject) Json.parse(Files.readAllBytes(DIR.resolve("manifest.json")));
    }

    static List<JsonObject> cases() throws Exception {
        JsonObject m = manifest();
        assertEquals(1L, m.integer("format").orElseThrow(), "manifest format");
        List<JsonObject> out = new ArrayList<>();
        for (JsonValue v : ((JsonArray) m.get("cases").orElseThrow()).items()) {
            out.add((JsonObject) v);
        }
        return out;
    }

    @Test
    @DisplayName("every file in valid/ and invalid/ is listed in the manifest exactly once")
    void every_file_is_listed() throws Exception {
        Set<String> listed = new HashSet<>();
        for (JsonObject c : cases()) {
            assertTrue(listed.add(c.string("file").orElseThrow()), "listed twice: " + c);
        }
        Set<String> files = new TreeSet<>();
        for (String sub : List.of("valid", "invalid")) {
            try (Stream<Path> s = Files.list(DIR.resolve(sub))) {
                s.forEach(p -> files.add(sub + "/" + p.getFileName()));
            }
        }
        assertEquals(files, new TreeSet<>(listed));
    }

    @TestFactory
    @DisplayName("each case decodes, re-encodes and is refused as the manifest says")
    Stream<DynamicTest> each_case() throws Exception {
        return cases().stream().map(c -> DynamicTest.dynamicTest(c.string("name").orElseThrow(), () -> run(c)));
    }

    private static void run(JsonObject c) throws IOException {
        byte[] bytes = Files.readAllBytes(DIR.resolve(c.string("file").orElseThrow()));
        int max = c.integer("max_bytes").map(Long::intValue).orElse(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES);
        boolean valid = c.get("valid").orElseThrow().toString().equals("true");
        if (valid) {
            Envelope env = EnvelopeCodec.decode(bytes, max);
            byte[] first = EnvelopeCodec.encode(env);
            try {
                assertTrue(jsonEqual(Json.parse(bytes), Json.parse(first)),
                        "re-encoding changed a value: " + new String(first, java.nio.charset.StandardCharsets.UTF_8));
            } catch (dev.rdq.json.JsonSyntaxException e) {
                fail(e);
            }
            byte[] second = EnvelopeCodec.encode(EnvelopeCodec.decode(first, max));
            assertArrayEquals(first, second, "the encoding is not a fixed point");
            if (c.get("canonical").map(v -> v.toString().equals("true")).orElse(false)) {
                assertArrayEquals(bytes, first, "a canonical fixture did not re-encode byte for byte");
            }
        } else {
            try {
                EnvelopeCodec.decode(bytes, max);
                fail("accepted an invalid fixture");
            } catch (EnvelopeException e) {
                assertEquals(c.string("code").orElseThrow(), e.code(), e.getMessage());
                if (c.get("path").isPresent()) {
                    assertEquals(c.string("path").orElseThrow(), e.field().orElse(null), e.getMessage());
                }
            }
        }
    }

    /** JSON value equality where a missing member equals a null one, at every depth. */
    static boolean jsonEqual(JsonValue a, JsonValue b) {
        if (a instanceof JsonObject x && b instanceof JsonObject y) {
            Set<String> keys = new HashSet<>(x.members().keySet());
            keys.addAll(y.members().keySet());
            for (String k : keys) {
                JsonValue u = x.members().getOrDefault(k, JsonNull.INSTANCE);
                JsonValue v = y.members().getOrDefault(k, JsonNull.INSTANCE);
                if (!jsonEqual(u, v)) {
                    return false;
                }
            }
            return true;
        }
        if (a instanceof JsonArray x && b instanceof JsonArray y) {
            if (x.items().size() != y.items().size()) {
                return false;
            }
            for (int i = 0; i < x.items().size(); i++) {
                if (!jsonEqual(x.items().get(i), y.items().get(i))) {
                    return false;
                }
            }
            return true;
        }
        if (a instanceof JsonNumber x && b instanceof JsonNumber y) {
            return x.bigDecimalValue().compareTo(y.bigDecimalValue()) == 0;
        }
        return a.equals(b);
    }
}
