package dev.rdq.json;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class Utf8CheckTest {

    private static boolean jdkAccepts(byte[] b) {
        try {
            StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(b));
            return true;
        } catch (CharacterCodingException e) {
            return false;
        }
    }

    private static boolean accepts(byte[] b) {
        try {
            Json.checkUtf8(b);
            return true;
        } catch (JsonSyntaxException e) {
            return false;
        }
    }

    @Test
    @DisplayName("the UTF-8 check agrees with the JDK's strict decoder on edge cases and random bytes")
    void agrees_with_the_jdk_decoder() {
        byte[][] edges = {
            {}, {0x41}, {(byte) 0xc2, (byte) 0x80}, {(byte) 0xc1, (byte) 0xbf}, {(byte) 0xe0, (byte) 0x9f, (byte) 0xbf},
            {(byte) 0xe0, (byte) 0xa0, (byte) 0x80}, {(byte) 0xed, (byte) 0x9f, (byte) 0xbf}, {(byte) 0xed, (byte) 0xa0, (byte) 0x80},
            {(byte) 0xef, (byte) 0xbf, (byte) 0xbf}, {(byte) 0xf0, (byte) 0x8f, (byte) 0xbf, (byte) 0xbf},
            {(byte) 0xf0, (byte) 0x90, (byte) 0x80, (byte) 0x80}, {(byte) 0xf4, (byte) 0x8f, (byte) 0xbf, (byte) 0xbf},
            {(byte) 0xf4, (byte) 0x90, (byte) 0x80, (byte) 0x80}, {(byte) 0xf5, (byte) 0x80, (byte) 0x80, (byte) 0x80},
            {(byte) 0xc2}, {(byte) 0xe2, (byte) 0x82}, {(byte) 0x80}, {(byte) 0xff}, {0x41, (byte) 0xf0, (byte) 0x9f, (byte) 0x98},
        };
        for (byte[] e : edges) {
            assertEquals(jdkAccepts(e), accepts(e), () -> java.util.HexFormat.of().formatHex(e));
        }
        Random r = new Random(20261201);
        int accepted = 0;
        for (int i = 0; i < 200_000; i++) {
            byte[] b = new byte[1 + r.nextInt(8)];
            for (int k = 0; k < b.length; k++) {
                // Mostly bytes that matter to UTF-8: continuation and lead bytes.
                b[k] = (byte) (r.nextInt(4) == 0 ? r.nextInt(0x80) : 0x80 + r.nextInt(0x80));
            }
            boolean want = jdkAccepts(b);
            accepted += want ? 1 : 0;
            assertEquals(want, accepts(b), () -> java.util.HexFormat.of().formatHex(b));
        }
        // The sample holds both kinds, so the comparison means something.
        org.junit.jupiter.api.Assertions.assertTrue(accepted > 1000 && accepted < 199_000, "accepted " + accepted);
    }
}
