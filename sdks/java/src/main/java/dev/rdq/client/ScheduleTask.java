package dev.rdq.client;

import dev.rdq.envelope.EnvelopeException;
import dev.rdq.envelope.ErrorCode;
import dev.rdq.envelope.Names;
import dev.rdq.json.Json;
import dev.rdq.json.JsonSyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeMap;

/**
 * The task a {@link Schedule} submits at each fire: the fields of a submit
 * worth repeating ({@code docs/schedules.md}, "A schedule"). Immutable;
 * {@link Builder#build()} checks the queue and handler names, the headers
 * and the flow key with the rules of a submit, before any request, naming
 * the field as the server does ({@code task.queue}, {@code task.headers.KEY}).
 */
public final class ScheduleTask {
    /** The content type of a template that names none (as for a submit). */
    public static final String DEFAULT_CONTENT_TYPE = "application/octet-stream";

    private final String queue;
    private final String handlerRef;
    private final byte[] payload;
    private final String payloadContentType;
    private final Map<String, String> headers;
    private final int priority;
    private final String flowKey;

    private ScheduleTask(Builder b) {
        this.queue = b.queue;
        this.handlerRef = b.handlerRef;
        this.payload = b.payload;
        this.payloadContentType = b.payloadContentType;
        this.headers = Collections.unmodifiableMap(new TreeMap<>(b.headers));
        this.priority = b.priority;
        this.flowKey = b.flowKey;
    }

    /** A builder for a task of {@code handlerRef} on {@code queue}, without payload. */
    public static Builder builder(String queue, String handlerRef) {
        return new Builder(queue, handlerRef);
    }

    /** A task of {@code handlerRef} on {@code queue} with no payload, headers or flow key, priority 0. */
    public static ScheduleTask of(String queue, String handlerRef) {
        return builder(queue, handlerRef).build();
    }

    public String queue() {
        return queue;
    }

    public String handlerRef() {
        return handlerRef;
    }

    /** The payload's bytes (a copy; empty when there is none). */
    public byte[] payload() {
        return payload.clone();
    }

    /** The payload's MIME type ({@value #DEFAULT_CONTENT_TYPE} unless set). */
    public String payloadContentType() {
        return payloadContentType;
    }

    /** The user headers, sorted by key. */
    public Map<String, String> headers() {
        return headers;
    }

    /** Claim priority, 0–255. */
    public int priority() {
        return priority;
    }

    public Optional<String> flowKey() {
        return Optional.ofNullable(flowKey);
    }

    /** A builder holding this task's fields. */
    public Builder toBuilder() {
        Builder b = new Builder(queue, handlerRef);
        b.payload = payload;
        b.payloadContentType = payloadContentType;
        b.headers.putAll(headers);
        b.priority = priority;
        b.flowKey = flowKey;
        return b;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ScheduleTask t && queue.equals(t.queue) && handlerRef.equals(t.handlerRef)
                && Arrays.equals(payload, t.payload) && payloadContentType.equals(t.payloadContentType)
                && headers.equals(t.headers) && priority == t.priority && Objects.equals(flowKey, t.flowKey);
    }

    @Override
    public int hashCode() {
        return Objects.hash(queue, handlerRef, Arrays.hashCode(payload), payloadContentType, headers, priority, flowKey);
    }

    @Override
    public String toString() {
        return "ScheduleTask[queue=" + queue + ", handlerRef=" + handlerRef + ", payload=" + payload.length + " bytes of "
                + payloadContentType + ", headers=" + headers + ", priority=" + priority
                + (flowKey == null ? "" : ", flowKey=" + flowKey) + "]";
    }

    /** Options of a schedule's task. */
    public static final class Builder {
        private final String queue;
        private final String handlerRef;
        private byte[] payload = new byte[0];
        private String payloadContentType = DEFAULT_CONTENT_TYPE;
        private final Map<String, String> headers = new TreeMap<>();
        private int priority;
        private String flowKey;

        private Builder(String queue, String handlerRef) {
            this.queue = Objects.requireNonNull(queue, "queue");
            this.handlerRef = Objects.requireNonNull(handlerRef, "handlerRef");
        }

        /** Opaque payload bytes (content type {@value ScheduleTask#DEFAULT_CONTENT_TYPE} unless set). */
        public Builder payload(byte[] bytes) {
            this.payload = bytes.clone();
            return this;
        }

        /** Opaque payload bytes with their MIME type. */
        public Builder payload(byte[] bytes, String contentType) {
            payload(bytes);
            return payloadContentType(contentType);
        }

        /**
         * A JSON payload, stored byte for byte as given, of content type
         * {@code application/json}; refused with {@code INVALID_FIELD} naming
         * {@code task.payload} unless it is one strict JSON document.
         */
        public Builder payloadJson(String json) {
            byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
            try {
                Json.parse(bytes);
            } catch (JsonSyntaxException e) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "task.payload", "is not JSON: " + e.getMessage());
            }
            return payload(bytes, "application/json");
        }

        /** The payload's MIME type, 1 to 255 characters (checked by the server). */
        public Builder payloadContentType(String contentType) {
            this.payloadContentType = Objects.requireNonNull(contentType, "contentType");
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

        /** Claim priority, 0–255, higher first (default 0). */
        public Builder priority(int priority) {
            if (priority < 0 || priority > 255) {
                throw new EnvelopeException(ErrorCode.INVALID_FIELD, "task.priority", priority + " is outside 0-255");
            }
            this.priority = priority;
            return this;
        }

        /** The flow key of each task ({@code docs/flow-control.md}); 1-128 bytes of {@code [A-Za-z0-9._:/@=+-]}. */
        public Builder flowKey(String key) {
            this.flowKey = Objects.requireNonNull(key, "key");
            return this;
        }

        /** The task, checked with the rules of a submit: queue and handler names, reserved headers, the flow key. */
        public ScheduleTask build() {
            try {
                Names.validateQueueName(queue);
                Names.validateHandlerRef(handlerRef);
                Names.validateUserHeaders(headers);
                if (flowKey != null) {
                    Names.validateFlowKey(flowKey);
                }
            } catch (EnvelopeException e) {
                // The same rule as a submit's, at the field's path within a schedule.
                throw new EnvelopeException(e.errorCode(), "task." + e.field().orElse(""), e.detail());
            }
            return new ScheduleTask(this);
        }
    }
}
