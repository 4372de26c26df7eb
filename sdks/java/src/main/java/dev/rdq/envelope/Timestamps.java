package dev.rdq.envelope;

import java.time.Instant;

/**
 * Wire timestamps: exactly {@code YYYY-MM-DDTHH:MM:SS.mmmZ}, years 0000–9999.
 * Any other spelling is refused rather than normalised, so the bytes a writer
 * produced stay stable (as the Rust codec's {@code time.rs}).
 */
public final class Timestamps {
    /** {@code 0000-01-01T00:00:00.000Z}. */
    public static final long MIN_MS = -62_167_219_200_000L;
    /** {@code 9999-12-31T23:59:59.999Z}. */
    public static final long MAX_MS = 253_402_300_799_999L;

    private Timestamps() {}

    /** Milliseconds since the epoch of the one accepted spelling, or {@code null} for any other text. */
    public static Long parseMillis(String s) {
        if (s.length() != 24 || s.charAt(4) != '-' || s.charAt(7) != '-' || s.charAt(10) != 'T'
                || s.charAt(13) != ':' || s.charAt(16) != ':' || s.charAt(19) != '.' || s.charAt(23) != 'Z') {
            return null;
        }
        long year = num(s, 0, 4);
        long month = num(s, 5, 7);
        long day = num(s, 8, 10);
        long hour = num(s, 11, 13);
        long minute = num(s, 14, 16);
        long second = num(s, 17, 19);
        long milli = num(s, 20, 23);
        if (year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0 || milli < 0) {
            return null;
        }
        if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) || hour > 23 || minute > 59 || second > 59) {
            return null;
        }
        long days = daysFromCivil(year, month, day);
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli;
    }

    /** The instant of the one accepted spelling, or {@code null}. */
    public static Instant parse(String s) {
        Long ms = parseMillis(s);
        return ms == null ? null : Instant.ofEpochMilli(ms);
    }

    /** The wire spelling of {@code ms}; callers keep it within {@link #MIN_MS}..{@link #MAX_MS}. */
    public static String format(long ms) {
        long days = Math.floorDiv(ms, 86_400_000L);
        long rem = Math.floorMod(ms, 86_400_000L);
        long[] ymd = civilFromDays(days);
        char[] out = "0000-00-00T00:00:00.000Z".toCharArray();
        put(out, 0, 4, ymd[0]);
        put(out, 5, 2, ymd[1]);
        put(out, 8, 2, ymd[2]);
        put(out, 11, 2, rem / 3_600_000);
        put(out, 14, 2, rem / 60_000 % 60);
        put(out, 17, 2, rem / 1000 % 60);
        put(out, 20, 3, rem % 1000);
        return new String(out);
    }

    /** The wire spelling of {@code t}, cut to the millisecond. */
    public static String format(Instant t) {
        return format(t.toEpochMilli());
    }

    /**
     * {@code t} cut to the millisecond; refused with {@code INVALID_FIELD} at
     * {@code path} outside years 0000–9999.
     */
    static Instant checked(Instant t, String path) {
        long ms;
        try {
            ms = t.toEpochMilli();
        } catch (ArithmeticException e) {
            ms = Long.MAX_VALUE;
        }
        if (ms < MIN_MS || ms > MAX_MS) {
            throw new EnvelopeException(ErrorCode.INVALID_FIELD, path, t + " is outside years 0000-9999");
        }
        return Instant.ofEpochMilli(ms);
    }

    private static void put(char[] out, int at, int width, long v) {
        for (int i = at + width - 1; i >= at; i--) {
            out[i] = (char) ('0' + (v % 10));
            v /= 10;
        }
    }

    private static long num(String s, int from, int to) {
        long acc = 0;
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            if (c < '0' || c > '9') {
                return -1;
            }
            acc = acc * 10 + (c - '0');
        }
        return acc;
    }

    private static boolean isLeap(long y) {
        return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    }

    private static long daysInMonth(long y, long m) {
        if (m == 2) {
            return isLeap(y) ? 29 : 28;
        }
        return (m == 4 || m == 6 || m == 9 || m == 11) ? 30 : 31;
    }

    // Howard Hinnant's days_from_civil / civil_from_days, proleptic Gregorian.
    private static long daysFromCivil(long y, long m, long d) {
        y = m <= 2 ? y - 1 : y;
        long era = Math.floorDiv(y, 400);
        long yoe = y - era * 400;
        long mp = (m + 9) % 12;
        long doy = (153 * mp + 2) / 5 + d - 1;
        long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146_097 + doe - 719_468;
    }

    private static long[] civilFromDays(long z) {
        z += 719_468;
        long era = Math.floorDiv(z, 146_097);
        long doe = z - era * 146_097;
        long yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long mp = (5 * doy + 2) / 153;
        long d = doy - (153 * mp + 2) / 5 + 1;
        long m = mp < 10 ? mp + 3 : mp - 9;
        return new long[] {m <= 2 ? yoe + era * 400 + 1 : yoe + era * 400, m, d};
    }
}
