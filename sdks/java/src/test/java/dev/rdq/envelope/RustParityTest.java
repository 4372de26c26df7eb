package dev.rdq.envelope;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rdq.json.JsonObject;
import dev.rdq.support.Repo;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * Differential test against the Rust codec itself ({@code rdq envelope check}):
 * every fixture and a set of edge cases must be accepted or refused alike,
 * with the same code and path, and accepted ones encoded to the same bytes.
 */
@DisplayName("parity with the Rust codec (rdq envelope check)")
class RustParityTest {

    record Verdict(boolean ok, byte[] canonical, String code, String path) {}

    static Verdict rust(byte[] input, int max) throws Exception {
        Process p = new ProcessBuilder(Repo.rdqBinary().toString(), "envelope", "check", "--max-bytes",
                Integer.toString(max), "-").start();
        try (var in = p.getOutputStream()) {
            in.write(input);
        }
        byte[] out = p.getInputStream().readAllBytes();
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        int rc = p.waitFor();
        if (rc == 0) {
            // The CLI ends its output with a newline; the encoding has none.
            return new Verdict(true, Arrays.copyOf(out, out.length - 1), null, null);
        }
        int colon = err.indexOf(':');
        return new Verdict(false, null, colon < 0 ? err : err.substring(0, colon), err);
    }

    static void compare(byte[] input, int max) throws Exception {
        Verdict r = rust(input, max);
        try {
            Envelope env = EnvelopeCodec.decode(input, max);
            byte[] java = EnvelopeCodec.encode(env);
            if (!r.ok) {
                fail("Java accepted what Rust refused: " + r.path);
            }
            assertArrayEquals(r.canonical, java, () -> "encodings differ:\nrust: "
                    + new String(r.canonical, StandardCharsets.UTF_8) + "\njava: " + new String(java, StandardCharsets.UTF_8));
        } catch (EnvelopeException e) {
            if (r.ok) {
                fail("Java refused what Rust accepted: " + e.getMessage());
            }
            assertEquals(r.code, e.code(), "rust said " + r.path + "; java said " + e.getMessage());
            if (e.field().isPresent()) {
                assertTrue(r.path.startsWith(e.code() + ": " + e.field().get() + ": "),
                        "rust said " + r.path + "; java said " + e.getMessage());
            }
        }
    }

    @TestFactory
    @DisplayName("every fixture gets the same verdict and the same bytes")
    Stream<DynamicTest> fixtures() throws Exception {
        Path dir = Repo.fixtures();
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonObject c : FixturesTest.cases()) {
            String file = c.string("file").orElseThrow();
            int max = c.integer("max_bytes").map(Long::intValue).orElse(EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES);
            boolean valid = c.get("valid").orElseThrow().toString().equals("true");
            tests.add(DynamicTest.dynamicTest(file, () -> {
                byte[] bytes = Files.readAllBytes(dir.resolve(file));
                // A binary built before a fixture was added may not know its rule yet.
                Assumptions.assumeTrue(rust(bytes, max).ok == valid,
                        "the rdq binary disagrees with the manifest on " + file + ": rebuild it");
                compare(bytes, max);
            }));
        }
        return tests.stream();
    }

    static final String BASE = "{\"envelope_version\":1,\"id\":\"01J2ZK7Q8XW5H3N9G4T6B8RDQ0\",\"queue\":\"q\","
            + "\"handler_ref\":\"h\",\"payload\":\"\",\"payload_content_type\":\"text/plain\",\"status\":\"PENDING\","
            + "\"attempt_count\":0,\"redrive_count\":0,\"next_attempt_at\":null,\"lease_expires_at\":null,"
            + "\"created_at\":\"2026-07-20T14:03:22.117Z\"";

    static byte[] with(String tail) {
        return (BASE + tail + "}").getBytes(StandardCharsets.UTF_8);
    }

    static byte[] withAttemptCount(String n) {
        return new String(with(""), StandardCharsets.UTF_8).replace("\"attempt_count\":0", "\"attempt_count\":" + n)
                .getBytes(StandardCharsets.UTF_8);
    }

    @TestFactory
    @DisplayName("edge cases of syntax, numbers, escapes and ordering get the same verdict")
    Stream<DynamicTest> edge_cases() {
        List<Object[]> cases = new ArrayList<>();
        cases.add(new Object[] {"126 nested arrays", with(",\"x\":" + "[".repeat(126) + "]".repeat(126))});
        cases.add(new Object[] {"127 nested arrays", with(",\"x\":" + "[".repeat(127) + "]".repeat(127))});
        cases.add(new Object[] {"byte order mark", concat(new byte[] {(byte) 0xef, (byte) 0xbb, (byte) 0xbf}, with(""))});
        // (-0 and numbers beyond a double changed meaning with the Rust codec's
        // exact-number mode; the fixtures pin them, so a stale binary is not asked.)
        for (String n : List.of("1.0", "1e0", "18446744073709551616", "18446744073709551615", "4294967295",
                "4294967296", "-1", "-9223372036854775808", "-9223372036854775809", "01", "+1")) {
            cases.add(new Object[] {"attempt_count " + n, withAttemptCount(n)});
        }
        cases.add(new Object[] {"integers in unknown fields", with(",\"y\":[0,-1,9223372036854775807,-9223372036854775808,18446744073709551615]")});
        cases.add(new Object[] {"trailing whitespace", concat(with(""), " \n\t\r".getBytes(StandardCharsets.UTF_8))});
        cases.add(new Object[] {"trailing form feed", concat(with(""), new byte[] {0x0c})});
        cases.add(new Object[] {"trailing NUL", concat(with(""), new byte[] {0})});
        cases.add(new Object[] {"escapes", with(",\"s\":\"\\u0000\\u001f\\u007f\\/\\b\\f\\n\\r\\t\\\"\\\\\\u2028\\u2029\\ud83d\\ude00\u00e9\"")});
        cases.add(new Object[] {"raw control char", with(",\"s\":\"a\u0001b\"")});
        cases.add(new Object[] {"raw DEL", with(",\"s\":\"a\u007fb\"")});
        cases.add(new Object[] {"lone low surrogate", with(",\"s\":\"\\udc00\"")});
        cases.add(new Object[] {"reversed surrogates", with(",\"s\":\"\\ude00\\ud83d\"")});
        cases.add(new Object[] {"code point key order", with(",\"\uff21\":1,\"\ud83d\ude00\":2,\"a\":3,\"\":4,\"\u00e9\":5")});
        cases.add(new Object[] {"escaped duplicate in unknown", with(",\"ab\":1,\"a\\u0062\":2")});
        cases.add(new Object[] {"header order", with(",\"headers\":{\"\ud83d\ude00\":\"1\",\"\uff21\":\"2\",\"B\":\"3\",\"a\":\"4\"}")});
        cases.add(new Object[] {"header value number", with(",\"headers\":{\"b\":\"1\",\"a\":2}")});
        cases.add(new Object[] {"overlong UTF-8", concat(with(",\"s\":\""), new byte[] {(byte) 0xc0, (byte) 0xaf, '"', '}'})});
        cases.add(new Object[] {"UTF-8 surrogate", concat(with(",\"s\":\""), new byte[] {(byte) 0xed, (byte) 0xa0, (byte) 0x80, '"', '}'})});
        cases.add(new Object[] {"single quotes", "{'a':1}".getBytes(StandardCharsets.UTF_8)});
        cases.add(new Object[] {"comment", concat("/*x*/".getBytes(StandardCharsets.UTF_8), with(""))});
        cases.add(new Object[] {"version 18446744073709551616", with("").length == 0 ? new byte[0]
                : new String(with(""), StandardCharsets.UTF_8).replace("\"envelope_version\":1", "\"envelope_version\":18446744073709551616").getBytes(StandardCharsets.UTF_8)});
        cases.add(new Object[] {"version 1.0", new String(with(""), StandardCharsets.UTF_8).replace("\"envelope_version\":1", "\"envelope_version\":1.0").getBytes(StandardCharsets.UTF_8)});
        cases.add(new Object[] {"version -1", new String(with(""), StandardCharsets.UTF_8).replace("\"envelope_version\":1", "\"envelope_version\":-1").getBytes(StandardCharsets.UTF_8)});
        cases.add(new Object[] {"error detail nested", with(",\"attempts\":[{\"attempt_no\":1,\"started_at\":\"2026-07-20T14:03:22.117Z\",\"outcome\":\"PERMANENT_FAILURE\",\"error\":{\"type\":\"t\",\"message\":\"m\",\"detail\":{\"z\":[1,{\"b\":null,\"a\":true}],\"a\":\"x\"},\"zz\":1}}]")});
        String at = "\"at\":\"2026-07-20T14:03:30.000Z\"";
        cases.add(new Object[] {"cancel_requested members reordered, unknown ones", with(",\"cancel_requested\":{\"z\":1E5,\"message\":\"m\",\"by\":\"ops\"," + at + ",\"a\":[]}")});
        cases.add(new Object[] {"cancel_requested before dead_reason", with(",\"cancel_requested\":{" + at + ",\"by\":\"ops\"},\"dead_reason\":{\"code\":\"CANCELLED\"," + at + ",\"by\":\"ops\"}")});
        cases.add(new Object[] {"cancel_requested and dead_reason both bad", with(",\"cancel_requested\":{\"by\":\"\"},\"dead_reason\":{\"code\":\"x\"}")});
        cases.add(new Object[] {"cancel_requested duplicate key", with(",\"cancel_requested\":{" + at + ",\"by\":\"a\",\"by\":\"b\"}")});
        cases.add(new Object[] {"cancel_requested at a number", with(",\"cancel_requested\":{\"at\":1,\"by\":\"ops\"}")});
        cases.add(new Object[] {"cancel_requested by null", with(",\"cancel_requested\":{" + at + ",\"by\":null}")});
        cases.add(new Object[] {"cancel_requested empty", with(",\"cancel_requested\":{}")});
        cases.add(new Object[] {"cancel_requested array", with(",\"cancel_requested\":[]")});
        cases.add(new Object[] {"cancel_requested message object", with(",\"cancel_requested\":{" + at + ",\"by\":\"ops\",\"message\":{}}")});
        return cases.stream().map(c -> DynamicTest.dynamicTest((String) c[0],
                () -> compare((byte[]) c[1], EnvelopeCodec.DEFAULT_MAX_ENVELOPE_BYTES)));
    }

    static byte[] concat(byte[] a, byte[] b) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(a, 0, a.length);
        out.write(b, 0, b.length);
        return out.toByteArray();
    }

}
