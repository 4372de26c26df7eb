package dev.rdq.json;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Objects;

/**
 * A JSON number, kept as the text it was written with: {@code 18446744073709551616}
 * and {@code 0.1000000000000000000000001} survive a decode and an encode digit
 * for digit, whatever fits in a {@code long} or a {@code double}.
 */
public record JsonNumber(String text) implements JsonValue {
    public JsonNumber {
        Objects.requireNonNull(text, "text");
        if (!Json.isNumberSyntax(text)) {
            throw new IllegalArgumentException("not a JSON number: " + text);
        }
    }

    /** The number for a {@code long}. */
    public static JsonNumber of(long value) {
        return new JsonNumber(Long.toString(value));
    }

    /** The number for a {@link BigInteger}. */
    public static JsonNumber of(BigInteger value) {
        return new JsonNumber(value.toString());
    }

    /** The number for a {@link BigDecimal}, in plain notation when it has no exponent. */
    public static JsonNumber of(BigDecimal value) {
        return new JsonNumber(value.toString());
    }

    /** True when the text has no fraction and no exponent. */
    public boolean isIntegral() {
        return text.indexOf('.') < 0 && text.indexOf('e') < 0 && text.indexOf('E') < 0;
    }

    /** The exact value. */
    public BigDecimal bigDecimalValue() {
        return new BigDecimal(text);
    }

    /** The value as a {@code long}; throws {@link ArithmeticException} if it is not one exactly. */
    public long longValueExact() {
        return bigDecimalValue().longValueExact();
    }

    @Override
    public String typeName() {
        return "a number";
    }

    @Override
    public String toString() {
        return text;
    }
}
