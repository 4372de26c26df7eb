package dev.rdq.envelope;

import dev.rdq.json.Json;
import dev.rdq.json.JsonArray;
import dev.rdq.json.JsonNull;
import dev.rdq.json.JsonNumber;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonString;
import dev.rdq.json.JsonSyntaxException;
import dev.rdq.json.JsonValue;
import dev.rdq.json.JsonWriter;
import java.math.BigInteger;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * The canonical JSON codec of the v1 envelope, a port of the Rust codec
 * ({@code crates/rdq-envelope/src/codec.rs}).
 *
 * <p>Decoding is strict and checks in the Rust order, so the first failure —
 * its code and path — is the same: syntax; {@code envelope_version}; then each
 * field in the order of the canonical encoding; then size. Encoding is
 * deterministic: known fields in the canonical order, then unknown fields sorted
 * by key (code point order), compact, no trailing newline; so
 * {@code encode(decode(b))} equals {@code b} for every canonical {@code b}.
 *
 * <p>Numbers inside unknown fields and {@code detail} keep every digit
 * ({@code 18446744073709551616}, {@code 0.1000000000000000000000001},
 * {@code 2.50}, {@code -0}, {@code 1e400}); the exponent marker is written
 * {@code e+}/{@code e-}, as the Rust codec (serde_json with
 * {@code arbitrary_precision}) writes it.
 */
public final class EnvelopeCodec {
    /** Default limit on a canonical envelope: 1 MiB. */
    public static final int DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024;

    private static final Set<String> ENVELOPE_KEYS = Set.of("envelope_version", "id", "queue", "handler_ref",
            "handler_version", "payload", "payload_content_type", "payload_ref", "headers", "status", "priority",
            "deferral_count", "attempt_count", "redrive_count", "claim_count", "next_attempt_at",
            "lease_expires_at", "created_at", "attempts", "dead_reason", "cancel_requested");
    private static final Set<String> ATTEMPT_KEYS = Set.of("attempt_no", "started_at", "finished_at", "outcome", "error");
    private static final Set<String> ERROR_KEYS = Set.of("type", "message", "detail", "stack");
    private static final Set<String> DEAD_REASON_KEYS = Set.of("code", "at", "by", "message");
    private static final Set<String> CANCEL_REQUEST_KEYS = Set.of("at", "by", "message");
    private static final BigInteger I64_MIN = BigInteger.valueOf(Long.MIN_VALUE);
    private static final BigInteger U64_MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);
    private static final long U32_MAX = 0xffff_ffffL;

    private EnvelopeCodec() {}

    /** Decodes and validates one envelope from JSON bytes (no size limit). */
    public static Envelope decode(byte[] bytes) {
        return fromJson(parse(bytes));
    }

    /** Decodes, validates and refuses envelopes whose canonical form exceeds {@code maxBytes}. */
    public static Envelope decode(byte[] bytes, int maxBytes) {
        Envelope env = decode(bytes);
        checkSize(env, maxBytes);
        return env;
    }

    /** Refuses with {@code PAYLOAD_TOO_LARGE} if the canonical encoding exceeds {@code maxBytes}. */
    public static void checkSize(Envelope env, int maxBytes) {
        int len = encode(env).length;
        if (len > maxBytes) {
            throw new EnvelopeException(ErrorCode.PAYLOAD_TOO_LARGE, null,
                    "the serialised envelope is " + len + " bytes; the limit is " + maxBytes);
        }
    }

    /** Parses strict JSON, refusing syntax errors with {@code MALFORMED_ENVELOPE}. */
    public static JsonValue parse(byte[] bytes) {
        try {
            return Json.parse(bytes);
        } catch (JsonSyntaxException e) {
            throw new EnvelopeException(ErrorCode.MALFORMED_ENVELOPE, null, e.getMessage());
        }
    }

    /** The canonical encoding. */
    public static byte[] encode(Envelope env) {
        JsonWriter w = new JsonWriter(env.payloadBase64().length() + 512);
        encodeInto(env, w);
        return w.toByteArray();
    }

    /** Appends the canonical encoding to {@code w}. */
    public static void encodeInto(Envelope e, JsonWriter w) {
        int a = e.absent;
        w.startObject();
        w.key("envelope_version").number(Envelope.VERSION);
        w.key("id").string(e.id());
        w.key("queue").string(e.queue());
        w.key("handler_ref").string(e.handlerRef());
        String hv = e.handlerVersion().orElse(null);
        if (!((a & Envelope.HANDLER_VERSION) != 0 && hv == null)) {
            w.key("handler_version").stringOrNull(hv);
        }
        w.key("payload").string(e.payloadBase64());
        w.key("payload_content_type").string(e.payloadContentType());
        String pr = e.payloadRef().orElse(null);
        if (!((a & Envelope.PAYLOAD_REF) != 0 && pr == null)) {
            w.key("payload_ref").stringOrNull(pr);
        }
        if (!((a & Envelope.HEADERS) != 0 && e.headers().isEmpty())) {
            w.key("headers").startObject();
            for (Map.Entry<String, String> h : e.headers().entrySet()) {
                w.key(h.getKey()).string(h.getValue());
            }
            w.endObject();
        }
        w.key("status").string(e.status().name());
        if (!((a & Envelope.PRIORITY) != 0 && e.priority() == 0)) {
            w.key("priority").number(e.priority());
        }
        if (!((a & Envelope.DEFERRAL_COUNT) != 0 && e.deferralCount() == 0)) {
            w.key("deferral_count").number(e.deferralCount());
        }
        if (!((a & Envelope.ATTEMPT_COUNT) != 0 && e.attemptCount() == 0)) {
            w.key("attempt_count").number(e.attemptCount());
        }
        if (!((a & Envelope.REDRIVE_COUNT) != 0 && e.redriveCount() == 0)) {
            w.key("redrive_count").number(e.redriveCount());
        }
        if (!((a & Envelope.CLAIM_COUNT) != 0 && e.claimCount() == 0)) {
            w.key("claim_count").number(e.claimCount());
        }
        Instant na = e.nextAttemptAt().orElse(null);
        if (!((a & Envelope.NEXT_ATTEMPT_AT) != 0 && na == null)) {
            w.key("next_attempt_at");
            timestamp(w, na);
        }
        Instant le = e.leaseExpiresAt().orElse(null);
        if (!((a & Envelope.LEASE_EXPIRES_AT) != 0 && le == null)) {
            w.key("lease_expires_at");
            timestamp(w, le);
        }
        w.key("created_at");
        timestamp(w, e.createdAt());
        if (!((a & Envelope.ATTEMPTS) != 0 && e.attempts().isEmpty())) {
            w.key("attempts").startArray();
            for (AttemptRecord r : e.attempts()) {
                encodeAttempt(r, w);
            }
            w.endArray();
        }
        DeadReason dr = e.deadReason().orElse(null);
        if (dr != null) {
            w.key("dead_reason");
            encodeDeadReason(dr, w);
        } else if ((a & Envelope.DEAD_REASON_NULL) != 0) {
            w.key("dead_reason").nullValue();
        }
        CancelRequest cr = e.cancelRequested().orElse(null);
        if (cr != null) {
            w.key("cancel_requested");
            encodeCancelRequest(cr, w);
        } else if ((a & Envelope.CANCEL_REQUESTED_NULL) != 0) {
            w.key("cancel_requested").nullValue();
        }
        extra(w, e.extra(), ENVELOPE_KEYS);
        w.endObject();
    }

    private static void encodeAttempt(AttemptRecord r, JsonWriter w) {
        int a = r.absent;
        w.startObject();
        w.key("attempt_no").number(r.attemptNo());
        w.key("started_at");
        timestamp(w, r.startedAt());
        Instant fa = r.finishedAt().orElse(null);
        if (!((a & AttemptRecord.FINISHED_AT) != 0 && fa == null)) {
            w.key("finished_at");
            timestamp(w, fa);
        }
        AttemptOutcome oc = r.outcome().orElse(null);
        if (!((a & AttemptRecord.OUTCOME) != 0 && oc == null)) {
            w.key("outcome").stringOrNull(oc == null ? null : oc.name());
        }
        ErrorInfo err = r.error().orElse(null);
        if (!((a & AttemptRecord.ERROR) != 0 && err == null)) {
            w.key("error");
            if (err == null) {
                w.nullValue();
            } else {
                encodeError(err, w);
            }
        }
        extra(w, r.extra(), ATTEMPT_KEYS);
        w.endObject();
    }

    private static void encodeError(ErrorInfo e, JsonWriter w) {
        int a = e.absent;
        w.startObject();
        w.key("type").string(e.type());
        w.key("message").string(e.message());
        JsonValue detail = e.detail().orElse(null);
        if (!((a & ErrorInfo.DETAIL) != 0 && detail == null)) {
            w.key("detail").value(detail == null ? JsonNull.INSTANCE : detail);
        }
        String stack = e.stack().orElse(null);
        if (!((a & ErrorInfo.STACK) != 0 && stack == null)) {
            w.key("stack").stringOrNull(stack);
        }
        extra(w, e.extra(), ERROR_KEYS);
        w.endObject();
    }

    private static void encodeDeadReason(DeadReason r, JsonWriter w) {
        w.startObject();
        w.key("code").string(r.code());
        w.key("at");
        timestamp(w, r.at());
        w.key("by").string(r.by());
        String message = r.message().orElse(null);
        if (!((r.absent & DeadReason.MESSAGE) != 0 && message == null)) {
            w.key("message").stringOrNull(message);
        }
        extra(w, r.extra(), DEAD_REASON_KEYS);
        w.endObject();
    }

    private static void encodeCancelRequest(CancelRequest r, JsonWriter w) {
        w.startObject();
        w.key("at");
        timestamp(w, r.at());
        w.key("by").string(r.by());
        String message = r.message().orElse(null);
        if (!((r.absent & CancelRequest.MESSAGE) != 0 && message == null)) {
            w.key("message").stringOrNull(message);
        }
        extra(w, r.extra(), CANCEL_REQUEST_KEYS);
        w.endObject();
    }

    /** Encodes an {@link ErrorInfo} on its own (as a settle request carries it). */
    public static void encodeErrorInto(ErrorInfo e, JsonWriter w) {
        encodeError(e, w);
    }

    private static void timestamp(JsonWriter w, Instant t) {
        if (t == null) {
            w.nullValue();
        } else {
            w.string(Timestamps.format(t));
        }
    }

    private static void extra(JsonWriter w, JsonObject extra, Set<String> known) {
        for (Map.Entry<String, JsonValue> m : extra.members().entrySet()) {
            if (!known.contains(m.getKey())) {
                w.key(m.getKey()).value(m.getValue());
            }
        }
    }

    // ------------------------------------------------------------------
    // Decoding, field by field, with paths.

    private static EnvelopeException malformed(String path, String message) {
        return new EnvelopeException(ErrorCode.MALFORMED_ENVELOPE, path == null || path.isEmpty() ? null : path, message);
    }

    private static EnvelopeException invalid(String path, String message) {
        return new EnvelopeException(ErrorCode.INVALID_FIELD, path, message);
    }

    /** One JSON object being read field by field; the members outside {@code known} are its {@code extra}. */
    private static final class Fields {
        final Map<String, JsonValue> map;
        final Set<String> known;
        final String prefix;
        int taken;

        Fields(JsonValue value, String prefix, Set<String> known) {
            if (!(value instanceof JsonObject o)) {
                throw malformed(prefix, "expected an object, found " + value.typeName());
            }
            this.map = o.members();
            this.known = known;
            this.prefix = prefix;
        }

        String path(String key) {
            return prefix.isEmpty() ? key : prefix + "." + key;
        }

        /** The member {@code key}; each decoder takes a key at most once, so {@code taken} counts members read. */
        JsonValue take(String key) {
            JsonValue v = map.get(key);
            if (v != null) {
                taken++;
            }
            return v;
        }

        JsonValue required(String key) {
            JsonValue v = take(key);
            if (v == null || v == JsonNull.INSTANCE) {
                throw malformed(path(key), "required field is missing or null");
            }
            return v;
        }

        String string(String key) {
            return asString(key, required(key));
        }

        String asString(String key, JsonValue v) {
            if (v instanceof JsonString s) {
                return s.value();
            }
            throw malformed(path(key), "expected a string, found " + v.typeName());
        }

        /** A nullable string; {@code absent[0]} tells whether the field was left out. */
        String optString(String key, boolean[] absent) {
            JsonValue v = take(key);
            absent[0] = v == null;
            if (v == null || v == JsonNull.INSTANCE) {
                return null;
            }
            return asString(key, v);
        }

        long asUint(String key, JsonValue v, long max) {
            String path = path(key);
            if (!(v instanceof JsonNumber n)) {
                throw malformed(path, "expected an integer, found " + v.typeName());
            }
            IntegerKind k = integerKind(n.text());
            switch (k.kind) {
                case UNSIGNED:
                    if (k.value.compareTo(BigInteger.valueOf(max)) <= 0) {
                        return k.value.longValue();
                    }
                    throw invalid(path, k.value + " is larger than " + max);
                case NEGATIVE:
                    throw invalid(path, n.text() + " is negative");
                default:
                    throw malformed(path, "expected an integer, found " + n.text());
            }
        }

        long uintOrZero(String key, long max, boolean[] absent) {
            JsonValue v = take(key);
            absent[0] = v == null;
            return v == null ? 0 : asUint(key, v, max);
        }

        Instant asTimestamp(String key, JsonValue v) {
            String s = asString(key, v);
            Long ms = Timestamps.parseMillis(s);
            if (ms == null) {
                throw invalid(path(key), Utf8.debugQuote(s)
                        + " is not an RFC 3339 UTC timestamp of the form 2026-07-20T14:03:22.117Z");
            }
            return Instant.ofEpochMilli(ms);
        }

        Instant timestamp(String key) {
            return asTimestamp(key, required(key));
        }

        Instant optTimestamp(String key, boolean[] absent) {
            JsonValue v = take(key);
            absent[0] = v == null;
            if (v == null || v == JsonNull.INSTANCE) {
                return null;
            }
            return asTimestamp(key, v);
        }

        JsonObject extra() {
            if (taken == map.size()) {
                return JsonObject.EMPTY;
            }
            // JsonObject orders the members itself.
            Map<String, JsonValue> rest = new java.util.HashMap<>();
            for (Map.Entry<String, JsonValue> m : map.entrySet()) {
                if (!known.contains(m.getKey())) {
                    rest.put(m.getKey(), m.getValue());
                }
            }
            return JsonObject.of(rest);
        }
    }

    private enum Kind { UNSIGNED, NEGATIVE, NOT_AN_INTEGER }

    private record IntegerKind(Kind kind, BigInteger value) {}

    /**
     * How serde_json (exact-number mode) sees a number: an integer literal
     * within u64 is unsigned, one within i64 that is not (including
     * {@code -0}) is negative, anything else (a fraction, an exponent, beyond
     * those ranges) is not an integer.
     */
    private static IntegerKind integerKind(String text) {
        boolean integral = text.indexOf('.') < 0 && text.indexOf('e') < 0 && text.indexOf('E') < 0;
        if (!integral) {
            return new IntegerKind(Kind.NOT_AN_INTEGER, null);
        }
        if (text.equals("-0")) {
            return new IntegerKind(Kind.NEGATIVE, BigInteger.ZERO);
        }
        BigInteger v = text.length() <= 18 ? BigInteger.valueOf(Long.parseLong(text)) : new BigInteger(text);
        if (v.signum() >= 0) {
            return v.compareTo(U64_MAX) <= 0 ? new IntegerKind(Kind.UNSIGNED, v) : new IntegerKind(Kind.NOT_AN_INTEGER, null);
        }
        return v.compareTo(I64_MIN) >= 0 ? new IntegerKind(Kind.NEGATIVE, v) : new IntegerKind(Kind.NOT_AN_INTEGER, null);
    }

    private static int bit(boolean[] absent, int bit) {
        return absent[0] ? bit : 0;
    }

    /** Decodes an already-parsed JSON value (e.g. an envelope inside an API response). */
    public static Envelope fromJson(JsonValue value) {
        Fields f = new Fields(value, "", ENVELOPE_KEYS);

        // The version decides how to read everything else, so it is checked first.
        JsonValue version = f.required("envelope_version");
        if (version instanceof JsonNumber n) {
            IntegerKind k = integerKind(n.text());
            if (k.kind == Kind.UNSIGNED && k.value.compareTo(BigInteger.ONE) > 0) {
                throw new EnvelopeException(ErrorCode.UNSUPPORTED_ENVELOPE_VERSION, "envelope_version",
                        "version " + n.text() + " is newer than this engine's version " + Envelope.VERSION);
            }
        }
        long v = f.asUint("envelope_version", version, Envelope.VERSION);
        if (v == 0) {
            throw invalid("envelope_version", "version 0 does not exist; the first is 1");
        }

        String id = f.string("id");
        if (!Ulid.isValid(id)) {
            throw invalid("id", Utf8.debugQuote(id) + " is not a ULID (26 upper-case Crockford base32 characters)");
        }
        String queue = f.string("queue");
        Names.validateQueueName(queue);
        String handlerRef = f.string("handler_ref");
        Names.validateHandlerRef(handlerRef);
        boolean[] hvAbsent = new boolean[1];
        String handlerVersion = f.optString("handler_version", hvAbsent);
        String payload = f.string("payload");
        if (!isCanonicalBase64(payload)) {
            throw invalid("payload", "not canonical standard base64 with padding");
        }
        String contentType = f.string("payload_content_type");
        boolean[] prAbsent = new boolean[1];
        String payloadRef = f.optString("payload_ref", prAbsent);

        TreeMap<String, String> headers = new TreeMap<>(Json.CODE_POINT_ORDER);
        boolean headersAbsent;
        JsonValue h = f.take("headers");
        if (h == null) {
            headersAbsent = true;
        } else if (h instanceof JsonObject ho) {
            headersAbsent = false;
            for (Map.Entry<String, JsonValue> e : ho.members().entrySet()) {
                if (e.getValue() instanceof JsonString s) {
                    headers.put(e.getKey(), s.value());
                } else {
                    throw invalid("headers." + e.getKey(),
                            "header values must be strings, found " + e.getValue().typeName());
                }
            }
        } else {
            throw malformed("headers", "expected an object of strings, found " + h.typeName());
        }

        String statusText = f.string("status");
        Status status = Status.parse(statusText);
        if (status == null) {
            throw invalid("status", "unknown status " + Utf8.debugQuote(statusText)
                    + "; expected PENDING, IN_FLIGHT, SUCCEEDED or DEAD");
        }
        boolean[] pAbsent = new boolean[1];
        long priority = f.uintOrZero("priority", 255, pAbsent);
        boolean[] dcAbsent = new boolean[1];
        long deferrals = f.uintOrZero("deferral_count", U32_MAX, dcAbsent);
        boolean[] acAbsent = new boolean[1];
        long attemptCount = f.uintOrZero("attempt_count", U32_MAX, acAbsent);
        boolean[] rcAbsent = new boolean[1];
        long redrives = f.uintOrZero("redrive_count", U32_MAX, rcAbsent);
        boolean[] ccAbsent = new boolean[1];
        long claims = f.uintOrZero("claim_count", U32_MAX, ccAbsent);
        boolean[] naAbsent = new boolean[1];
        Instant nextAttemptAt = f.optTimestamp("next_attempt_at", naAbsent);
        boolean[] leAbsent = new boolean[1];
        Instant leaseExpiresAt = f.optTimestamp("lease_expires_at", leAbsent);
        Instant createdAt = f.timestamp("created_at");

        List<AttemptRecord> attempts = new ArrayList<>();
        boolean attemptsAbsent;
        JsonValue at = f.take("attempts");
        if (at == null) {
            attemptsAbsent = true;
        } else if (at instanceof JsonArray arr) {
            attemptsAbsent = false;
            for (int i = 0; i < arr.items().size(); i++) {
                attempts.add(decodeAttempt(arr.items().get(i), "attempts[" + i + "]"));
            }
        } else {
            throw malformed("attempts", "expected an array, found " + at.typeName());
        }
        JsonValue dv = f.take("dead_reason");
        boolean deadReasonNull = dv == JsonNull.INSTANCE;
        DeadReason deadReason = dv == null || deadReasonNull ? null : decodeDeadReason(dv, "dead_reason");
        JsonValue cv = f.take("cancel_requested");
        boolean cancelRequestedNull = cv == JsonNull.INSTANCE;
        CancelRequest cancelRequested = cv == null || cancelRequestedNull ? null
                : decodeCancelRequest(cv, "cancel_requested");

        int absent = bit(hvAbsent, Envelope.HANDLER_VERSION) | bit(prAbsent, Envelope.PAYLOAD_REF)
                | (headersAbsent ? Envelope.HEADERS : 0) | bit(pAbsent, Envelope.PRIORITY)
                | bit(dcAbsent, Envelope.DEFERRAL_COUNT) | bit(acAbsent, Envelope.ATTEMPT_COUNT)
                | bit(rcAbsent, Envelope.REDRIVE_COUNT) | bit(ccAbsent, Envelope.CLAIM_COUNT)
                | bit(naAbsent, Envelope.NEXT_ATTEMPT_AT) | bit(leAbsent, Envelope.LEASE_EXPIRES_AT)
                | (attemptsAbsent ? Envelope.ATTEMPTS : 0) | (deadReasonNull ? Envelope.DEAD_REASON_NULL : 0)
                | (cancelRequestedNull ? Envelope.CANCEL_REQUESTED_NULL : 0);

        return new Envelope.Builder()
                .raw(id, queue, handlerRef, handlerVersion, payload, contentType, payloadRef, headers, status)
                .rawCounts((int) priority, deferrals, attemptCount, redrives, claims, nextAttemptAt, leaseExpiresAt,
                        createdAt, attempts, deadReason, cancelRequested, f.extra(), absent)
                .buildUnchecked();
    }

    private static AttemptRecord decodeAttempt(JsonValue value, String prefix) {
        Fields f = new Fields(value, prefix, ATTEMPT_KEYS);
        long attemptNo = f.asUint("attempt_no", f.required("attempt_no"), U32_MAX);
        if (attemptNo == 0) {
            throw invalid(f.path("attempt_no"), "attempt numbers start at 1");
        }
        Instant startedAt = f.timestamp("started_at");
        boolean[] faAbsent = new boolean[1];
        Instant finishedAt = f.optTimestamp("finished_at", faAbsent);
        boolean[] ocAbsent = new boolean[1];
        String outcomeText = f.optString("outcome", ocAbsent);
        AttemptOutcome outcome = null;
        if (outcomeText != null) {
            outcome = AttemptOutcome.parse(outcomeText);
            if (outcome == null) {
                throw invalid(f.path("outcome"), "unknown outcome " + Utf8.debugQuote(outcomeText)
                        + "; expected SUCCESS, RETRYABLE_FAILURE, PERMANENT_FAILURE or LEASE_EXPIRED");
            }
        }
        JsonValue ev = f.take("error");
        boolean errAbsent = ev == null;
        ErrorInfo error = null;
        if (ev != null && ev != JsonNull.INSTANCE) {
            error = decodeError(ev, f.path("error"));
        }
        int absent = bit(faAbsent, AttemptRecord.FINISHED_AT) | bit(ocAbsent, AttemptRecord.OUTCOME)
                | (errAbsent ? AttemptRecord.ERROR : 0);
        return new AttemptRecord(attemptNo, startedAt, finishedAt, outcome, error, f.extra(), absent);
    }

    private static ErrorInfo decodeError(JsonValue value, String prefix) {
        Fields f = new Fields(value, prefix, ERROR_KEYS);
        String type = f.string("type");
        if (type.isEmpty()) {
            throw invalid(f.path("type"), "the error type must not be empty");
        }
        String message = f.string("message");
        JsonValue dv = f.take("detail");
        boolean detailAbsent = dv == null;
        JsonValue detail = dv == null || dv == JsonNull.INSTANCE ? null : dv;
        boolean[] stackAbsent = new boolean[1];
        String stack = f.optString("stack", stackAbsent);
        return new ErrorInfo(type, message, detail, stack, f.extra(),
                (detailAbsent ? ErrorInfo.DETAIL : 0) | bit(stackAbsent, ErrorInfo.STACK));
    }

    private static DeadReason decodeDeadReason(JsonValue value, String prefix) {
        Fields f = new Fields(value, prefix, DEAD_REASON_KEYS);
        String code = f.string("code");
        if (!DeadReason.isValidCode(code)) {
            throw invalid(f.path("code"),
                    Utf8.debugQuote(code) + " is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)");
        }
        Instant at = f.timestamp("at");
        String by = f.string("by");
        if (by.isEmpty()) {
            throw invalid(f.path("by"), "who decided must not be empty");
        }
        boolean[] messageAbsent = new boolean[1];
        String message = f.optString("message", messageAbsent);
        return new DeadReason(code, at, by, message, f.extra(), bit(messageAbsent, DeadReason.MESSAGE));
    }

    private static CancelRequest decodeCancelRequest(JsonValue value, String prefix) {
        Fields f = new Fields(value, prefix, CANCEL_REQUEST_KEYS);
        Instant at = f.timestamp("at");
        String by = f.string("by");
        if (by.isEmpty()) {
            throw invalid(f.path("by"), "who asked must not be empty");
        }
        boolean[] messageAbsent = new boolean[1];
        String message = f.optString("message", messageAbsent);
        return new CancelRequest(at, by, message, f.extra(), bit(messageAbsent, CancelRequest.MESSAGE));
    }

    /** A {@code cancel_requested} member on its own (as an API answer may carry it). */
    public static CancelRequest cancelRequestFromJson(JsonValue value) {
        return decodeCancelRequest(value, "cancel_requested");
    }

    /**
     * True for standard base64 with padding whose unused trailing bits are
     * zero: exactly the strings an encoder produces.
     */
    public static boolean isCanonicalBase64(String text) {
        int n = text.length();
        if (n % 4 != 0) {
            return false;
        }
        int pad = 0;
        if (n >= 1 && text.charAt(n - 1) == '=') {
            pad++;
            if (n >= 2 && text.charAt(n - 2) == '=') {
                pad++;
            }
        }
        int body = n - pad;
        for (int i = 0; i < body; i++) {
            if (b64(text.charAt(i)) < 0) {
                return false;
            }
        }
        if (pad == 0 || body == 0) {
            return true;
        }
        int last = b64(text.charAt(body - 1));
        return pad == 1 ? (last & 0b11) == 0 : (last & 0b1111) == 0;
    }

    private static int b64(char c) {
        if (c >= 'A' && c <= 'Z') {
            return c - 'A';
        }
        if (c >= 'a' && c <= 'z') {
            return c - 'a' + 26;
        }
        if (c >= '0' && c <= '9') {
            return c - '0' + 52;
        }
        if (c == '+') {
            return 62;
        }
        if (c == '/') {
            return 63;
        }
        return -1;
    }
}
