package dev.rdq.client;

import dev.rdq.RdqException;
import dev.rdq.envelope.ErrorCode;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.Names;
import dev.rdq.json.Json;
import dev.rdq.json.JsonSyntaxException;
import dev.rdq.json.JsonWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeMap;

/**
 * One task to submit: the client subset of the envelope plus scheduling
 * options ({@code POST /v1/tasks}). {@link Builder#build()} checks names and
 * refuses {@code rdq.}-prefixed headers (any case) before any request is made.
 */
public final class SubmitRequest {
    /**
     * The user header the SDK uses for a correlation id: the server's submit
     * has no correlation field, and the system header {@code rdq.correlation_id}
     * (which the Rust SDK writes in-process) is refused from HTTP clients.
     */
    public static final String CORRELATION_ID_HEADER = "correlation_id";

    private final String queue;
    private final String handlerRef;
    private final String handlerVersion;
    private final byte[] payload;
    private final byte[] payloadJson;
    private final String payloadContentType;
    private final Map<String, String> headers;
    private final long delayMs;
    private final int priority;
    private final String idempotencyKey;
    private final String flowKey;
    private final Unique unique;

    private SubmitRequest(Builder b) {
        this.queue = b.queue;
        this.handlerRef = b.handlerRef;
        this.handlerVersion = b.handlerVersion;
        this.payload = b.payload;
        this.payloadJson = b.payloadJson;
        this.payloadContentType = b.payloadContentType;
        this.headers = Collections.unmodifiableMap(new TreeMap<>(b.headers));
        this.delayMs = b.delayMs;
        this.priority = b.priority;
        this.idempotencyKey = b.idempotencyKey;
        this.flowKey = b.flowKey;
        this.unique = b.uniqueRequested
                ? new Unique(b.uniqueKey, b.uniqueKeyFrom, b.uniqueScope, b.uniqueHold, b.uniqueHoldMs, b.uniqueOnConflict)
                : null;
    }

    /** A builder for a task of {@code handlerRef} on {@code queue}. */
    public static Builder builder(String queue, String handlerRef) {
        return new Builder(queue, handlerRef);
    }

    public String queue() {
        return queue;
    }

    public String handlerRef() {
        return handlerRef;
    }

    public Map<String, String> headers() {
        return headers;
    }

    /** The payload's bytes (a JSON payload's UTF-8 text); empty when none was given. */
    public byte[] payload() {
        if (payloadJson != null) {
            return payloadJson.clone();
        }
        return payload == null ? new byte[0] : payload.clone();
    }

    /**
     * The payload's content type: as set, else {@code application/json} for
     * a JSON payload and {@code application/octet-stream} for bytes.
     */
    public String payloadContentType() {
        if (payloadContentType != null) {
            return payloadContentType;
        }
        return payloadJson != null ? "application/json" : "application/octet-stream";
    }

    public Optional<String> handlerVersion() {
        return Optional.ofNullable(handlerVersion);
    }

    /** How long after the submit the task is due, in milliseconds. */
    public long delayMs() {
        return delayMs;
    }

    public int priority() {
        return priority;
    }

    public Optional<String> idempotencyKey() {
        return Optional.ofNullable(idempotencyKey);
    }

    public Optional<String> flowKey() {
        return Optional.ofNullable(flowKey);
    }

    /** The submit's uniqueness ({@code docs/uniqueness.md}); empty for a submit without a unique key. */
    public Optional<Unique> unique() {
        return Optional.ofNullable(unique);
    }

    /** gRPC's {@code rdq.v1.SubmitRequest} of this submit (the payload's bytes and content type as stored over HTTP). */
    rdq.v1.Api.SubmitRequest toProto() {
        rdq.v1.Api.SubmitRequest.Builder b = rdq.v1.Api.SubmitRequest.newBuilder()
                .setQueue(queue)
                .setHandlerRef(handlerRef)
                .setPayload(com.google.protobuf.ByteString.copyFrom(payloadJson != null ? payloadJson
                        : payload == null ? new byte[0] : payload))
                .setPayloadContentType(payloadContentType())
                .putAllHeaders(headers)
                .setDelayMs(delayMs)
                .setPriority(priority);
        if (handlerVersion != null) {
            b.setHandlerVersion(handlerVersion);
        }
        if (idempotencyKey != null) {
            b.setIdempotencyKey(idempotencyKey);
        }
        if (flowKey != null) {
            b.setFlowKey(flowKey);
        }
        if (unique != null) {
            b.setUnique(unique.toProto());
        }
        return b.build();
    }

    /** The request body. */
    byte[] toJson() {
        int size = 128 + (payload == null ? 0 : payload.length * 4 / 3 + 4) + (payloadJson == null ? 0 : payloadJson.length);
        JsonWriter w = new JsonWriter(size);
        w.startObject();
        w.key("queue").string(queue);
        w.key("handler_ref").string(handlerRef);
        if (handlerVersion != null) {
            w.key("handler_version").string(handlerVersion);
        }
        if (payload != null) {
            w.key("payload").string(Base64.getEncoder().encodeToString(payload));
        }
        if (payloadJson != null) {
            w.key("payload_json").rawValue(payloadJson);
        }
        if (payloadContentType != null) {
            w.key("payload_content_type").string(payloadContentType);
        }
        if (!headers.isEmpty()) {
            w.key("headers").startObject();
            for (Map.Entry<String, String> h : headers.entrySet()) {
                w.key(h.getKey()).string(h.getValue());
            }
            w.endObject();
        }
        if (delayMs > 0) {
            w.key("delay_ms").number(delayMs);
        }
        if (priority != 0) {
            w.key("priority").number(priority);
        }
        if (idempotencyKey != null) {
            w.key("idempotency_key").string(idempotencyKey);
        }
        if (flowKey != null) {
            w.key("flow_key").string(flowKey);
        }
        if (unique != null) {
            w.key("unique");
            unique.write(w);
        }
        w.endObject();
        return w.toByteArray();
    }

    /** Options of one submit. */
    public static final class Builder {
        private final String queue;
        private final String handlerRef;
        private String handlerVersion;
        private byte[] payload;
        private byte[] payloadJson;
        private String payloadContentType;
        private final Map<String, String> headers = new TreeMap<>();
        private long delayMs;
        private int priority;
        private String idempotencyKey;
        private String flowKey;
        private boolean uniqueRequested;
        private String uniqueKey;
        private List<String> uniqueKeyFrom = List.of();
        private UniqueScope uniqueScope;
        private UniqueHold uniqueHold;
        private Long uniqueHoldMs;
        private UniqueConflict uniqueOnConflict;

        private Builder(String queue, String handlerRef) {
            this.queue = Objects.requireNonNull(queue, "queue");
            this.handlerRef = Objects.requireNonNull(handlerRef, "handlerRef");
        }

        /** Opaque payload bytes (content type {@code application/octet-stream} unless set). */
        public Builder payload(byte[] bytes) {
            this.payload = bytes.clone();
            this.payloadJson = null;
            return this;
        }

        /** Opaque payload bytes with their MIME type. */
        public Builder payload(byte[] bytes, String contentType) {
            payload(bytes);
            this.payloadContentType = contentType;
            return this;
        }

        /**
         * A JSON payload, stored byte for byte as given (content type
         * {@code application/json} unless set); refused with
         * {@code INVALID_FIELD} unless it is one strict JSON document.
         */
        public Builder payloadJson(String json) {
            byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
            try {
                Json.parse(bytes);
            } catch (JsonSyntaxException e) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "payload_json", "is not JSON: " + e.getMessage());
            }
            this.payloadJson = bytes;
            this.payload = null;
            return this;
        }

        public Builder payloadContentType(String contentType) {
            this.payloadContentType = contentType;
            return this;
        }

        /** A user header; the {@code rdq.} prefix (in any case) is refused at {@link #build()}. */
        public Builder header(String key, String value) {
            headers.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
            return this;
        }

        public Builder headers(Map<String, String> headers) {
            headers.forEach(this::header);
            return this;
        }

        /** Sets the correlation id, carried in the header {@link #CORRELATION_ID_HEADER}. */
        public Builder correlationId(String id) {
            return header(CORRELATION_ID_HEADER, id);
        }

        public Builder handlerVersion(String version) {
            this.handlerVersion = version;
            return this;
        }

        /** Due this long after the server receives the submit. */
        public Builder delay(Duration delay) {
            if (delay.isNegative()) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "delay_ms", "must not be negative");
            }
            this.delayMs = delay.toMillis();
            return this;
        }

        /** Claim priority, 0–255, higher first. */
        public Builder priority(int priority) {
            if (priority < 0 || priority > 255) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "priority", priority + " is outside 0-255");
            }
            this.priority = priority;
            return this;
        }

        /** A repeated submit with the same key to the same queue returns the original task. */
        public Builder idempotencyKey(String key) {
            this.idempotencyKey = key;
            return this;
        }

        /**
         * The task's flow key: the queue's per-key limits and fairness count
         * tasks by it ({@code docs/flow-control.md}); a tenant, an account, a
         * host. 1-128 bytes of {@code [A-Za-z0-9._:/@=+-]}, stored as the
         * system header {@code rdq.flow_key}.
         */
        public Builder flowKey(String key) {
            this.flowKey = Objects.requireNonNull(key, "key");
            return this;
        }

        /**
         * The task's unique key ({@code docs/uniqueness.md}): while the task
         * holds it (its {@link #uniqueHold hold}), another submit of the key
         * conflicts and, by default, fails with {@link dev.rdq.UniqueHeldException}
         * naming this task. 1 to 512 bytes without control characters
         * (checked by the server). Not with {@link #uniqueKeyFrom}.
         */
        public Builder uniqueKey(String key) {
            this.uniqueKey = Objects.requireNonNull(key, "key");
            this.uniqueRequested = true;
            return this;
        }

        /**
         * The task's unique key, derived by the server from the values at
         * these JSON pointers ({@code /customer_id}, {@code /order/lines/0/sku};
         * at most 16) of the JSON payload, so that every client and language
         * derives the same key: member order and whitespace do not matter.
         * Not with {@link #uniqueKey}.
         */
        public Builder uniqueKeyFrom(String... pointers) {
            return uniqueKeyFrom(Arrays.asList(pointers));
        }

        /** {@link #uniqueKeyFrom(String...)} from a list. */
        public Builder uniqueKeyFrom(List<String> pointers) {
            List<String> copy = new ArrayList<>(pointers.size());
            for (String p : pointers) {
                copy.add(Objects.requireNonNull(p, "pointer"));
            }
            this.uniqueKeyFrom = List.copyOf(copy);
            this.uniqueRequested = true;
            return this;
        }

        /** Where the unique key is unique: the queue (the default) or the queue and handler. */
        public Builder uniqueScope(UniqueScope scope) {
            this.uniqueScope = Objects.requireNonNull(scope, "scope");
            this.uniqueRequested = true;
            return this;
        }

        /**
         * How long the task holds its unique key (default {@link
         * UniqueHold#UNTIL_FINISHED}); {@link UniqueHold#FOR} takes its
         * duration from {@link #uniqueHoldFor}.
         */
        public Builder uniqueHold(UniqueHold hold) {
            this.uniqueHold = Objects.requireNonNull(hold, "hold");
            if (hold != UniqueHold.FOR) {
                this.uniqueHoldMs = null;
            }
            this.uniqueRequested = true;
            return this;
        }

        /**
         * The task holds its unique key for {@code duration} after its
         * submit, whatever its state ({@link UniqueHold#FOR}; 1 ms to ten
         * years, in milliseconds).
         */
        public Builder uniqueHoldFor(Duration duration) {
            if (duration.isNegative()) {
                throw new RdqException("INVALID_ARGUMENT", "unique.hold_ms", "must not be negative");
            }
            this.uniqueHold = UniqueHold.FOR;
            this.uniqueHoldMs = duration.toMillis();
            this.uniqueRequested = true;
            return this;
        }

        /** What a submit of the key does while another task holds it (default {@link UniqueConflict#RETURN}). */
        public Builder uniqueOnConflict(UniqueConflict onConflict) {
            this.uniqueOnConflict = Objects.requireNonNull(onConflict, "onConflict");
            this.uniqueRequested = true;
            return this;
        }

        /**
         * The request, checked: queue and handler names, reserved headers,
         * the flow key, and that a unique submit has exactly one of a key
         * and key pointers ({@code INVALID_ARGUMENT} naming {@code
         * unique.key}, as the server does) and a duration with {@link
         * UniqueHold#FOR}. The rest of the unique options is the server's to
         * check.
         */
        public SubmitRequest build() {
            Names.validateQueueName(queue);
            Names.validateHandlerRef(handlerRef);
            Names.validateUserHeaders(headers);
            if (flowKey != null) {
                Names.validateFlowKey(flowKey);
            }
            if (uniqueRequested) {
                if (uniqueKey != null && !uniqueKeyFrom.isEmpty()) {
                    throw new RdqException("INVALID_ARGUMENT", "unique.key", "give a key or key_from, not both");
                }
                if (uniqueKey == null && uniqueKeyFrom.isEmpty()) {
                    throw new RdqException("INVALID_ARGUMENT", "unique.key", "a unique submit needs a key or key_from");
                }
                if (uniqueHold == UniqueHold.FOR && uniqueHoldMs == null) {
                    throw new RdqException("INVALID_ARGUMENT", "unique.hold_ms", "a hold `for` needs hold_ms");
                }
            }
            return new SubmitRequest(this);
        }
    }
}
