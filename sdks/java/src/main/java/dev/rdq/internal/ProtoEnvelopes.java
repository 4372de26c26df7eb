package dev.rdq.internal;

import dev.rdq.RdqException;
import dev.rdq.envelope.CancelRequest;
import dev.rdq.envelope.Envelope;
import dev.rdq.envelope.EnvelopeCodec;
import dev.rdq.envelope.EnvelopeException;
import dev.rdq.json.Json;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonSyntaxException;
import dev.rdq.json.JsonValue;
import dev.rdq.json.JsonWriter;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import rdq.v1.EnvelopeOuterClass;

/**
 * {@code rdq.v1.Envelope} to the SDK's {@link Envelope}, through the
 * envelope's JSON ({@code docs/grpc.md}, "The envelope as protobuf"): every
 * field becomes the JSON member of the same name, an unset optional field
 * {@code null} unless {@code omitted} names it, {@code unknown_json} its
 * members. The JSON then goes through {@link EnvelopeCodec}, so a message
 * that does not map onto a valid envelope is refused with the codec's code.
 */
public final class ProtoEnvelopes {
    private ProtoEnvelopes() {}

    /** The envelope of {@code m}; an {@link RdqException} ({@code UNEXPECTED_RESPONSE}) when it is not a valid one. */
    public static Envelope toEnvelope(EnvelopeOuterClass.Envelope m) {
        try {
            return EnvelopeCodec.decode(toJson(m));
        } catch (EnvelopeException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, e.field().orElse(null),
                    "the server sent an envelope this SDK refuses: " + e.getMessage(), 0, e);
        }
    }

    /** The envelope's JSON text (members in the proto's order, unknown ones last). */
    public static byte[] toJson(EnvelopeOuterClass.Envelope m) {
        JsonWriter w = new JsonWriter(256 + m.getPayload().size() * 4 / 3);
        List<String> omitted = m.getOmittedList();
        w.startObject();
        w.key("envelope_version").number(m.getEnvelopeVersion());
        w.key("id").string(m.getId());
        w.key("queue").string(m.getQueue());
        w.key("handler_ref").string(m.getHandlerRef());
        optional(w, omitted, "handler_version", m.hasHandlerVersion() ? m.getHandlerVersion() : null);
        w.key("payload").string(Base64.getEncoder().encodeToString(m.getPayload().toByteArray()));
        w.key("payload_content_type").string(m.getPayloadContentType());
        optional(w, omitted, "payload_ref", m.hasPayloadRef() ? m.getPayloadRef() : null);
        if (!omitted.contains("headers")) {
            w.key("headers").startObject();
            for (Map.Entry<String, String> h : new TreeMap<>(m.getHeadersMap()).entrySet()) {
                w.key(h.getKey()).string(h.getValue());
            }
            w.endObject();
        }
        w.key("status").string(m.getStatus().name());
        counter(w, omitted, "priority", m.getPriority());
        counter(w, omitted, "deferral_count", m.getDeferralCount());
        counter(w, omitted, "attempt_count", m.getAttemptCount());
        counter(w, omitted, "redrive_count", m.getRedriveCount());
        counter(w, omitted, "claim_count", m.getClaimCount());
        optional(w, omitted, "next_attempt_at", m.hasNextAttemptAt() ? m.getNextAttemptAt() : null);
        optional(w, omitted, "lease_expires_at", m.hasLeaseExpiresAt() ? m.getLeaseExpiresAt() : null);
        w.key("created_at").string(m.getCreatedAt());
        if (!omitted.contains("attempts")) {
            w.key("attempts").startArray();
            for (EnvelopeOuterClass.AttemptRecord a : m.getAttemptsList()) {
                attempt(w, a);
            }
            w.endArray();
        }
        if (!omitted.contains("dead_reason")) {
            w.key("dead_reason");
            if (m.hasDeadReason()) {
                deadReason(w, m.getDeadReason());
            } else {
                w.nullValue();
            }
        }
        if (!omitted.contains("cancel_requested")) {
            w.key("cancel_requested");
            if (m.hasCancelRequested()) {
                cancelRequest(w, m.getCancelRequested());
            } else {
                w.nullValue();
            }
        }
        unknown(w, m.getUnknownJson());
        w.endObject();
        return w.toByteArray();
    }

    /**
     * The {@link CancelRequest} of {@code r} (a {@code WorkCancel}'s, an
     * envelope's), through its JSON as {@code cancel_requested}; an {@link
     * RdqException} ({@code UNEXPECTED_RESPONSE}) when it is not a valid one.
     */
    public static CancelRequest toCancelRequest(EnvelopeOuterClass.CancelRequest r) {
        JsonWriter w = new JsonWriter(128);
        cancelRequest(w, r);
        try {
            return EnvelopeCodec.cancelRequestFromJson(EnvelopeCodec.parse(w.toByteArray()));
        } catch (EnvelopeException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, e.field().orElse(null),
                    "the server sent a cancel request this SDK refuses: " + e.getMessage(), 0, e);
        }
    }

    private static void cancelRequest(JsonWriter w, EnvelopeOuterClass.CancelRequest r) {
        w.startObject();
        w.key("at").string(r.getAt());
        w.key("by").string(r.getBy());
        optional(w, r.getOmittedList(), "message", r.hasMessage() ? r.getMessage() : null);
        unknown(w, r.getUnknownJson());
        w.endObject();
    }

    private static void deadReason(JsonWriter w, EnvelopeOuterClass.DeadReason r) {
        w.startObject();
        w.key("code").string(r.getCode());
        w.key("at").string(r.getAt());
        w.key("by").string(r.getBy());
        optional(w, r.getOmittedList(), "message", r.hasMessage() ? r.getMessage() : null);
        unknown(w, r.getUnknownJson());
        w.endObject();
    }

    private static void attempt(JsonWriter w, EnvelopeOuterClass.AttemptRecord a) {
        List<String> omitted = a.getOmittedList();
        w.startObject();
        w.key("attempt_no").number(a.getAttemptNo());
        w.key("started_at").string(a.getStartedAt());
        optional(w, omitted, "finished_at", a.hasFinishedAt() ? a.getFinishedAt() : null);
        if (!omitted.contains("outcome")) {
            w.key("outcome").stringOrNull(a.getOutcome() == EnvelopeOuterClass.Outcome.OUTCOME_UNSPECIFIED ? null
                    : a.getOutcome().name());
        }
        if (!omitted.contains("error")) {
            w.key("error");
            if (a.hasError()) {
                error(w, a.getError());
            } else {
                w.nullValue();
            }
        }
        unknown(w, a.getUnknownJson());
        w.endObject();
    }

    private static void error(JsonWriter w, EnvelopeOuterClass.ErrorInfo e) {
        List<String> omitted = e.getOmittedList();
        w.startObject();
        w.key("type").string(e.getType());
        w.key("message").string(e.getMessage());
        if (!omitted.contains("detail")) {
            w.key("detail");
            if (e.hasDetailJson()) {
                w.value(parse(e.getDetailJson(), "detail_json"));
            } else {
                w.nullValue();
            }
        }
        optional(w, omitted, "stack", e.hasStack() ? e.getStack() : null);
        unknown(w, e.getUnknownJson());
        w.endObject();
    }

    private static void optional(JsonWriter w, List<String> omitted, String key, String value) {
        if (!omitted.contains(key)) {
            w.key(key).stringOrNull(value);
        }
    }

    private static void counter(JsonWriter w, List<String> omitted, String key, int value) {
        if (!omitted.contains(key)) {
            w.key(key).number(Integer.toUnsignedLong(value));
        }
    }

    private static void unknown(JsonWriter w, String json) {
        if (json.isEmpty()) {
            return;
        }
        if (!(parse(json, "unknown_json") instanceof JsonObject o)) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, "unknown_json",
                    "the server sent unknown_json that is not a JSON object", 0, null);
        }
        for (Map.Entry<String, JsonValue> e : o.members().entrySet()) {
            w.key(e.getKey()).value(e.getValue());
        }
    }

    private static JsonValue parse(String json, String field) {
        try {
            return Json.parse(json);
        } catch (JsonSyntaxException e) {
            throw new RdqException(RdqException.UNEXPECTED_RESPONSE, field, "the server sent " + field
                    + " that is not JSON: " + e.getMessage(), 0, e);
        }
    }
}
