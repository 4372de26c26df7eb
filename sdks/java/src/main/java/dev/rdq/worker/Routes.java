package dev.rdq.worker;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.rdq.envelope.Envelope;
import dev.rdq.json.Json;
import dev.rdq.json.JsonValue;
import java.nio.ByteBuffer;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;

/**
 * A queue's handlers and how each turns a task into a call: the payload
 * decoder, the handler, its own outcome mapper and timeout.
 */
final class Routes {
    private Routes() {}

    /** What a handler takes, read from its task. */
    @FunctionalInterface
    interface ArgReader<T> {
        T read(Leased task) throws Exception;
    }

    /** One registered handler: read its argument, call it, decide with its own mapper. */
    static final class Route<T, R> {
        /** What the argument is, for the message of a {@link PayloadDecodeException}. */
        final String target;
        final ArgReader<T> reader;
        final ValueHandler<T, R> handler;
        /** The handler's own mapper; null: the queue's. */
        final OutcomeMapper<? super R> mapper;
        /** Null: no timeout. */
        final Duration timeout;

        Route(String target, ArgReader<T> reader, ValueHandler<T, R> handler, OutcomeMapper<? super R> mapper,
                Duration timeout) {
            this.target = target;
            this.reader = reader;
            this.handler = handler;
            this.mapper = mapper;
            this.timeout = timeout;
        }

        Route<T, R> withTimeout(Duration d) {
            return new Route<>(target, reader, handler, mapper, d);
        }

        /** A handler of the whole envelope. */
        static <R> Route<Envelope, R> ofEnvelope(ValueHandler<Envelope, R> handler, OutcomeMapper<? super R> mapper,
                Duration timeout) {
            return new Route<>("an envelope", Leased::envelope, handler, mapper, timeout);
        }

        /** A handler of the payload, decoded by {@code decoder}. */
        static <T, R> Route<T, R> ofPayload(String target, PayloadDecoder<T> decoder, ValueHandler<T, R> handler,
                OutcomeMapper<? super R> mapper, Duration timeout) {
            return new Route<>(target, task -> decoder.decode(task.payload()), handler, mapper, timeout);
        }
    }

    /** A queue's routes: by handler_ref, plus a fallback. */
    static final class QueueRoutes {
        final String queue;
        final Map<String, Route<?, ?>> byRef;
        final Route<?, ?> fallback;
        final OutcomeLadder ladder;

        QueueRoutes(String queue, Map<String, Route<?, ?>> byRef, Route<?, ?> fallback, OutcomeLadder ladder) {
            this.queue = queue;
            this.byRef = byRef;
            this.fallback = fallback;
            this.ladder = ladder;
        }

        Route<?, ?> routeFor(String ref) {
            Route<?, ?> r = byRef.get(ref);
            return r != null ? r : fallback;
        }
    }

    /** The decoder for a handler of {@code type}: bytes, text, a JSON tree, or Jackson data binding. */
    static <T> PayloadDecoder<T> decoderFor(Class<T> type, ObjectMapper mapper) {
        if (type == byte[].class) {
            return type::cast;
        }
        if (type == String.class) {
            return bytes -> type.cast(StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes)).toString());
        }
        if (JsonValue.class.isAssignableFrom(type)) {
            return bytes -> type.cast(Json.parse(bytes));
        }
        return bytes -> mapper.readValue(bytes, type);
    }

    /** The SDK's default data binding: Jackson's defaults, except that members the class lacks are ignored. */
    static ObjectMapper defaultObjectMapper() {
        return new ObjectMapper().disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES);
    }
}
