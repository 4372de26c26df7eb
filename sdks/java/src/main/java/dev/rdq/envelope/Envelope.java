package dev.rdq.envelope;

import dev.rdq.json.Json;
import dev.rdq.json.JsonObject;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * A task: the v1 wire envelope ({@code docs/envelope.md}),
 * immutable. {@link EnvelopeCodec} decodes and encodes it; the encoding is
 * byte-identical to the Rust codec's.
 *
 * <p>Fields a writer left out and that still hold their default stay left
 * out when re-encoded, so envelopes written by other tools round-trip byte for
 * byte; unknown fields ({@link #extra()}) survive at every level.
 * {@code dead_reason} and {@code cancel_requested} are the other way round:
 * an unset one is left out unless its writer wrote it as null.
 */
public final class Envelope {
    /** The envelope version this SDK reads and writes. */
    public static final int VERSION = 1;

    static final int HANDLER_VERSION = 1;
    static final int PAYLOAD_REF = 1 << 1;
    static final int HEADERS = 1 << 2;
    static final int PRIORITY = 1 << 3;
    static final int DEFERRAL_COUNT = 1 << 4;
    static final int ATTEMPT_COUNT = 1 << 5;
    static final int REDRIVE_COUNT = 1 << 6;
    static final int NEXT_ATTEMPT_AT = 1 << 7;
    static final int LEASE_EXPIRES_AT = 1 << 8;
    static final int ATTEMPTS = 1 << 9;
    static final int CLAIM_COUNT = 1 << 10;
    // Unlike the others, set when dead_reason was written as null: an unset
    // dead reason is left out unless its writer wrote it so.
    static final int DEAD_REASON_NULL = 1 << 11;
    // Like DEAD_REASON_NULL, for cancel_requested.
    static final int CANCEL_REQUESTED_NULL = 1 << 12;

    private final String id;
    private final String queue;
    private final String handlerRef;
    private final String handlerVersion;
    private final String payload;
    private final String payloadContentType;
    private final String payloadRef;
    private final SortedMap<String, String> headers;
    private final Status status;
    private final int priority;
    private final long deferralCount;
    private final long attemptCount;
    private final long redriveCount;
    private final long claimCount;
    private final Instant nextAttemptAt;
    private final Instant leaseExpiresAt;
    private final Instant createdAt;
    private final List<AttemptRecord> attempts;
    private final DeadReason deadReason;
    private final CancelRequest cancelRequested;
    private final JsonObject extra;
    final int absent;

    private Envelope(Builder b) {
        this.id = b.id;
        this.queue = b.queue;
        this.handlerRef = b.handlerRef;
        this.handlerVersion = b.handlerVersion;
        this.payload = b.payload;
        this.payloadContentType = b.payloadContentType;
        this.payloadRef = b.payloadRef;
        TreeMap<String, String> h = new TreeMap<>(Json.CODE_POINT_ORDER);
        h.putAll(b.headers);
        this.headers = Collections.unmodifiableSortedMap(h);
        this.status = b.status;
        this.priority = b.priority;
        this.deferralCount = b.deferralCount;
        this.attemptCount = b.attemptCount;
        this.redriveCount = b.redriveCount;
        this.claimCount = b.claimCount;
        this.nextAttemptAt = b.nextAttemptAt;
        this.leaseExpiresAt = b.leaseExpiresAt;
        this.createdAt = b.createdAt;
        this.attempts = List.copyOf(b.attempts);
        this.deadReason = b.deadReason;
        this.cancelRequested = b.cancelRequested;
        this.extra = b.extra;
        this.absent = b.absent;
    }

    /**
     * A builder for a fresh PENDING envelope with a new id, due now, every
     * optional field written except the reserved {@code payload_ref}.
     */
    public static Builder builder(String queue, String handlerRef) {
        Instant now = Instant.ofEpochMilli(System.currentTimeMillis());
        Builder b = new Builder();
        b.id = Ulid.generate();
        b.queue = queue;
        b.handlerRef = handlerRef;
        b.payload = "";
        b.payloadContentType = "application/octet-stream";
        b.status = Status.PENDING;
        b.nextAttemptAt = now;
        b.createdAt = now;
        b.absent = PAYLOAD_REF;
        return b;
    }

    /** A builder holding this envelope's fields; a field set on it is written from then on. */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.id = id;
        b.queue = queue;
        b.handlerRef = handlerRef;
        b.handlerVersion = handlerVersion;
        b.payload = payload;
        b.payloadContentType = payloadContentType;
        b.payloadRef = payloadRef;
        b.headers.putAll(headers);
        b.status = status;
        b.priority = priority;
        b.deferralCount = deferralCount;
        b.attemptCount = attemptCount;
        b.redriveCount = redriveCount;
        b.claimCount = claimCount;
        b.nextAttemptAt = nextAttemptAt;
        b.leaseExpiresAt = leaseExpiresAt;
        b.createdAt = createdAt;
        b.attempts.addAll(attempts);
        b.deadReason = deadReason;
        b.cancelRequested = cancelRequested;
        b.extra = extra;
        b.absent = absent;
        return b;
    }

    /** Always {@link #VERSION}. */
    public int envelopeVersion() {
        return VERSION;
    }

    /** The ULID, the task's identity for its whole life. */
    public String id() {
        return id;
    }

    /** The logical queue. */
    public String queue() {
        return queue;
    }

    /** The stable handler name. */
    public String handlerRef() {
        return handlerRef;
    }

    /** The optional handler version. */
    public Optional<String> handlerVersion() {
        return Optional.ofNullable(handlerVersion);
    }

    /** The payload bytes (a fresh copy each call). */
    public byte[] payload() {
        return Base64.getDecoder().decode(payload);
    }

    /** The payload as its canonical base64 text, as on the wire. */
    public String payloadBase64() {
        return payload;
    }

    /** MIME type of the payload. */
    public String payloadContentType() {
        return payloadContentType;
    }

    /** Reserved claim-check pointer; rdq never populates it. */
    public Optional<String> payloadRef() {
        return Optional.ofNullable(payloadRef);
    }

    /** The headers, sorted; {@code rdq.} keys are system metadata. */
    public SortedMap<String, String> headers() {
        return headers;
    }

    /** One header. */
    public Optional<String> header(String key) {
        return Optional.ofNullable(headers.get(key));
    }

    public Status status() {
        return status;
    }

    /** Claim priority, 0–255, higher first. */
    public int priority() {
        return priority;
    }

    public long deferralCount() {
        return deferralCount;
    }

    /** Attempts consumed since submit or the last redrive. */
    public long attemptCount() {
        return attemptCount;
    }

    public long redriveCount() {
        return redriveCount;
    }

    /** Claims made so far; the current claim's fencing token. */
    public long claimCount() {
        return claimCount;
    }

    public Optional<Instant> nextAttemptAt() {
        return Optional.ofNullable(nextAttemptAt);
    }

    public Optional<Instant> leaseExpiresAt() {
        return Optional.ofNullable(leaseExpiresAt);
    }

    public Instant createdAt() {
        return createdAt;
    }

    /** The attempt history, oldest first. */
    public List<AttemptRecord> attempts() {
        return attempts;
    }

    /** The open attempt, while the task is in flight. */
    public Optional<AttemptRecord> openAttempt() {
        if (attempts.isEmpty()) {
            return Optional.empty();
        }
        AttemptRecord last = attempts.get(attempts.size() - 1);
        return last.isOpen() ? Optional.of(last) : Optional.empty();
    }

    /** The error of the most recent attempt that has one. */
    public Optional<ErrorInfo> lastError() {
        for (int i = attempts.size() - 1; i >= 0; i--) {
            Optional<ErrorInfo> e = attempts.get(i).error();
            if (e.isPresent()) {
                return e;
            }
        }
        return Optional.empty();
    }

    /** Why the task is DEAD; empty while it is not (or when its writer predates the field). */
    public Optional<DeadReason> deadReason() {
        return Optional.ofNullable(deadReason);
    }

    /**
     * The cancel asked of the task while it ran, if one was: set on a running
     * task by a cancel, kept as history once it finished, removed by a redrive.
     */
    public Optional<CancelRequest> cancelRequested() {
        return Optional.ofNullable(cancelRequested);
    }

    /** Fields this version does not know, kept as written. */
    public JsonObject extra() {
        return extra;
    }

    /** The canonical encoding (same as {@link EnvelopeCodec#encode(Envelope)}). */
    public byte[] encode() {
        return EnvelopeCodec.encode(this);
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof Envelope e)) {
            return false;
        }
        return id.equals(e.id) && queue.equals(e.queue) && handlerRef.equals(e.handlerRef)
                && Objects.equals(handlerVersion, e.handlerVersion) && payload.equals(e.payload)
                && payloadContentType.equals(e.payloadContentType) && Objects.equals(payloadRef, e.payloadRef)
                && headers.equals(e.headers) && status == e.status && priority == e.priority
                && deferralCount == e.deferralCount && attemptCount == e.attemptCount
                && redriveCount == e.redriveCount && claimCount == e.claimCount
                && Objects.equals(nextAttemptAt, e.nextAttemptAt) && Objects.equals(leaseExpiresAt, e.leaseExpiresAt)
                && createdAt.equals(e.createdAt) && attempts.equals(e.attempts)
                && Objects.equals(deadReason, e.deadReason) && Objects.equals(cancelRequested, e.cancelRequested)
                && extra.equals(e.extra) && absent == e.absent;
    }

    @Override
    public int hashCode() {
        return Objects.hash(id, queue, handlerRef, status, attemptCount, claimCount, createdAt);
    }

    /** The canonical encoding as text. */
    @Override
    public String toString() {
        return new String(encode(), java.nio.charset.StandardCharsets.UTF_8);
    }

    /** Builds an {@link Envelope}; {@link #build()} checks every field rule of the codec. */
    public static final class Builder {
        private String id;
        private String queue;
        private String handlerRef;
        private String handlerVersion;
        private String payload;
        private String payloadContentType;
        private String payloadRef;
        private final TreeMap<String, String> headers = new TreeMap<>(Json.CODE_POINT_ORDER);
        private Status status;
        private int priority;
        private long deferralCount;
        private long attemptCount;
        private long redriveCount;
        private long claimCount;
        private Instant nextAttemptAt;
        private Instant leaseExpiresAt;
        private Instant createdAt;
        private final List<AttemptRecord> attempts = new ArrayList<>();
        private DeadReason deadReason;
        private CancelRequest cancelRequested;
        private JsonObject extra = JsonObject.EMPTY;
        private int absent;

        Builder() {}

        public Builder id(String id) {
            this.id = id;
            return this;
        }

        public Builder queue(String queue) {
            this.queue = queue;
            return this;
        }

        public Builder handlerRef(String handlerRef) {
            this.handlerRef = handlerRef;
            return this;
        }

        public Builder handlerVersion(String handlerVersion) {
            this.handlerVersion = handlerVersion;
            absent &= ~HANDLER_VERSION;
            return this;
        }

        /** The payload bytes (stored base64-encoded). */
        public Builder payload(byte[] bytes) {
            this.payload = Base64.getEncoder().encodeToString(bytes);
            return this;
        }

        public Builder payloadContentType(String contentType) {
            this.payloadContentType = contentType;
            return this;
        }

        public Builder headers(Map<String, String> headers) {
            this.headers.clear();
            this.headers.putAll(headers);
            absent &= ~HEADERS;
            return this;
        }

        public Builder header(String key, String value) {
            this.headers.put(key, value);
            absent &= ~HEADERS;
            return this;
        }

        public Builder status(Status status) {
            this.status = status;
            return this;
        }

        public Builder priority(int priority) {
            this.priority = priority;
            absent &= ~PRIORITY;
            return this;
        }

        public Builder deferralCount(long n) {
            this.deferralCount = n;
            absent &= ~DEFERRAL_COUNT;
            return this;
        }

        public Builder attemptCount(long n) {
            this.attemptCount = n;
            absent &= ~ATTEMPT_COUNT;
            return this;
        }

        public Builder redriveCount(long n) {
            this.redriveCount = n;
            absent &= ~REDRIVE_COUNT;
            return this;
        }

        public Builder claimCount(long n) {
            this.claimCount = n;
            absent &= ~CLAIM_COUNT;
            return this;
        }

        public Builder nextAttemptAt(Instant t) {
            this.nextAttemptAt = t;
            absent &= ~NEXT_ATTEMPT_AT;
            return this;
        }

        public Builder leaseExpiresAt(Instant t) {
            this.leaseExpiresAt = t;
            absent &= ~LEASE_EXPIRES_AT;
            return this;
        }

        public Builder createdAt(Instant t) {
            this.createdAt = t;
            return this;
        }

        public Builder attempts(List<AttemptRecord> attempts) {
            this.attempts.clear();
            this.attempts.addAll(attempts);
            absent &= ~ATTEMPTS;
            return this;
        }

        public Builder addAttempt(AttemptRecord attempt) {
            this.attempts.add(attempt);
            absent &= ~ATTEMPTS;
            return this;
        }

        /**
         * Why the task is DEAD, or {@code null} for none; an unset reason is
         * left out of the encoding, even one its writer wrote as null.
         */
        public Builder deadReason(DeadReason reason) {
            this.deadReason = reason;
            absent &= ~DEAD_REASON_NULL;
            return this;
        }

        /**
         * The cancel asked of the task while it ran, or {@code null} for none;
         * an unset request is left out of the encoding, even one its writer
         * wrote as null.
         */
        public Builder cancelRequested(CancelRequest request) {
            this.cancelRequested = request;
            absent &= ~CANCEL_REQUESTED_NULL;
            return this;
        }

        /** Unknown fields; keys that name a known field are not written. */
        public Builder extra(JsonObject extra) {
            this.extra = Objects.requireNonNull(extra, "extra");
            return this;
        }

        // Used by the decoder, which already checked every value.
        Builder raw(String id, String queue, String handlerRef, String handlerVersion, String payload,
                String payloadContentType, String payloadRef, Map<String, String> headers, Status status) {
            this.id = id;
            this.queue = queue;
            this.handlerRef = handlerRef;
            this.handlerVersion = handlerVersion;
            this.payload = payload;
            this.payloadContentType = payloadContentType;
            this.payloadRef = payloadRef;
            this.headers.putAll(headers);
            this.status = status;
            return this;
        }

        Builder rawCounts(int priority, long deferralCount, long attemptCount, long redriveCount, long claimCount,
                Instant nextAttemptAt, Instant leaseExpiresAt, Instant createdAt, List<AttemptRecord> attempts,
                DeadReason deadReason, CancelRequest cancelRequested, JsonObject extra, int absent) {
            this.priority = priority;
            this.deferralCount = deferralCount;
            this.attemptCount = attemptCount;
            this.redriveCount = redriveCount;
            this.claimCount = claimCount;
            this.nextAttemptAt = nextAttemptAt;
            this.leaseExpiresAt = leaseExpiresAt;
            this.createdAt = createdAt;
            this.attempts.addAll(attempts);
            this.deadReason = deadReason;
            this.cancelRequested = cancelRequested;
            this.extra = extra;
            this.absent = absent;
            return this;
        }

        Envelope buildUnchecked() {
            return new Envelope(this);
        }

        /** The envelope, refused with the codec's code and path if a field breaks a rule. */
        public Envelope build() {
            if (id == null || !Ulid.isValid(id)) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "id", "not a ULID (26 upper-case Crockford base32 characters)");
            }
            Names.validateQueueName(Objects.requireNonNull(queue, "queue"));
            Names.validateHandlerRef(Objects.requireNonNull(handlerRef, "handler_ref"));
            Objects.requireNonNull(payloadContentType, "payload_content_type");
            Objects.requireNonNull(status, "status");
            Objects.requireNonNull(createdAt, "created_at");
            if (priority < 0 || priority > 255) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "priority", priority + " is outside 0-255");
            }
            checkU32("deferral_count", deferralCount);
            checkU32("attempt_count", attemptCount);
            checkU32("redrive_count", redriveCount);
            checkU32("claim_count", claimCount);
            createdAt = Timestamps.checked(createdAt, "created_at");
            if (nextAttemptAt != null) {
                nextAttemptAt = Timestamps.checked(nextAttemptAt, "next_attempt_at");
            }
            if (leaseExpiresAt != null) {
                leaseExpiresAt = Timestamps.checked(leaseExpiresAt, "lease_expires_at");
            }
            for (Map.Entry<String, String> h : headers.entrySet()) {
                Objects.requireNonNull(h.getValue(), "headers." + h.getKey());
            }
            return new Envelope(this);
        }

        private static void checkU32(String path, long v) {
            if (v < 0 || v > 0xffff_ffffL) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, path, v + " is outside 0-4294967295");
            }
        }
    }
}
