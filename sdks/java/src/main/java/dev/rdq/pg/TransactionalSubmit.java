package dev.rdq.pg;

import dev.rdq.RdqException;
import dev.rdq.client.SubmitRequest;
import dev.rdq.envelope.Ulid;
import dev.rdq.json.JsonWriter;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Submits a task inside the caller's own PostgreSQL transaction, on an rdq
 * store's schema ({@code docs/stores/postgres.md}, "Submitting inside your
 * transaction"): the task exists exactly when the connection's transaction
 * commits, and workers waiting on its queue are woken at the commit.
 * Nothing goes through {@code rdq serve}: the statement calls the schema's
 * {@code SCHEMA.submit} function, which writes the row, the queue count and
 * the wake-up an rdq node writes, with the same canonical envelope.
 *
 * <p>Plain JDBC, so any driver and pool serves; the SDK depends on no
 * driver. A refusal is read from its SQLSTATE (22023) and its message,
 * {@code CODE: field: why}, which every driver passes on.
 */
public final class TransactionalSubmit {
    /** The PostgreSQL store's limit on its schema name. */
    private static final int MAX_SCHEMA_LEN = 48;

    /** The codes {@code SCHEMA.submit} refuses with (its HINT; its MESSAGE starts with one). */
    private static final List<String> CODES = List.of(
            "INVALID_QUEUE_NAME", "INVALID_HANDLER_REF", "RESERVED_HEADER", "PAYLOAD_TOO_LARGE", "INVALID_FIELD");

    private TransactionalSubmit() {}

    /**
     * Submits {@code request} on {@code connection} (autocommit off: the
     * task is part of its transaction; with autocommit on the submit is a
     * transaction of its own) into the rdq store in {@code schema}. Answers
     * the new task's id, or the id of the task already holding the request's
     * idempotency key in its queue. A second transaction submitting the same
     * key waits for the first: it answers the first one's task if that
     * commits, and writes its own if it rolls back.
     *
     * @throws RdqException a refusal with rdq's stable code and the field's
     *     path ({@code INVALID_QUEUE_NAME}, {@code INVALID_HANDLER_REF},
     *     {@code RESERVED_HEADER}, {@code PAYLOAD_TOO_LARGE},
     *     {@code INVALID_FIELD}; {@code INVALID_ARGUMENT} for a bad schema
     *     name). Those PostgreSQL makes leave the transaction aborted, as any
     *     failed statement does: roll it back. Text PostgreSQL cannot hold
     *     (U+0000, a lone surrogate) and a bad schema name are refused before
     *     anything is sent, leaving the transaction as it was.
     * @throws SQLException any other failure, as the driver reported it (a
     *     serialization failure, SQLSTATE 40001, is retried as a whole
     *     transaction, as any other)
     */
    public static String submit(Connection connection, String schema, SubmitRequest request) throws SQLException {
        String sql = statement(schema);
        checkText(request);
        try (PreparedStatement ps = connection.prepareStatement(sql)) {
            ps.setString(1, request.queue());
            ps.setString(2, request.handlerRef());
            ps.setBytes(3, request.payload());
            ps.setString(4, request.payloadContentType());
            ps.setString(5, headersJson(request.headers()));
            ps.setInt(6, request.priority());
            ps.setLong(7, request.delayMs());
            setText(ps, 8, request.idempotencyKey().orElse(null));
            setText(ps, 9, request.handlerVersion().orElse(null));
            setText(ps, 10, request.flowKey().orElse(null));
            try (ResultSet rs = ps.executeQuery()) {
                String id = rs.next() ? rs.getString(1) : null;
                if (id == null || !Ulid.isValid(id)) {
                    throw new RdqException(RdqException.UNEXPECTED_RESPONSE, null,
                            schema + ".submit answered " + id);
                }
                return id;
            }
        } catch (SQLException e) {
            RdqException refused = refusal(e);
            if (refused != null) {
                throw refused;
            }
            throw e;
        }
    }

    /**
     * The statement {@link #submit} prepares for {@code schema}: ten
     * parameters, in the order of {@code SCHEMA.submit}.
     *
     * @throws RdqException {@code INVALID_ARGUMENT} unless {@code schema} is
     *     a valid rdq schema name ({@code [a-z_][a-z0-9_]*}, at most 48
     *     bytes, not {@code pg_…}), which is what lets it be written into
     *     the statement
     */
    public static String statement(String schema) {
        checkSchema(schema);
        return "SELECT " + schema + ".submit(?::text, ?::text, ?::bytea, ?::text, ?::text::jsonb, "
                + "?::int4, ?::int8, ?::text, ?::text, ?::text)";
    }

    static void checkSchema(String schema) {
        boolean ok = schema != null && !schema.isEmpty() && schema.length() <= MAX_SCHEMA_LEN
                && !schema.startsWith("pg_");
        for (int i = 0; ok && i < schema.length(); i++) {
            char c = schema.charAt(i);
            ok = c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9');
        }
        if (!ok) {
            throw new RdqException("INVALID_ARGUMENT", null, "schema " + (schema == null ? "null" : '"' + schema + '"')
                    + " is not a plain name: use [a-z_][a-z0-9_]*, at most " + MAX_SCHEMA_LEN
                    + " bytes, not starting with pg_");
        }
    }

    private static void setText(PreparedStatement ps, int index, String value) throws SQLException {
        if (value == null) {
            ps.setNull(index, Types.VARCHAR);
        } else {
            ps.setString(index, value);
        }
    }

    private static String headersJson(Map<String, String> headers) {
        if (headers.isEmpty()) {
            return "{}";
        }
        JsonWriter w = new JsonWriter(64 * headers.size());
        w.startObject();
        headers.forEach((k, v) -> w.key(k).string(v));
        w.endObject();
        return new String(w.toByteArray(), java.nio.charset.StandardCharsets.UTF_8);
    }

    /**
     * Refuses U+0000 and lone surrogates in any text of the request:
     * PostgreSQL's text cannot hold the one, and UTF-8 cannot carry the
     * other (a submit through rdq serve takes U+0000: the envelope is
     * stored as bytes).
     */
    private static void checkText(SubmitRequest r) {
        List<String[]> texts = new ArrayList<>();
        texts.add(new String[] {"queue", r.queue()});
        texts.add(new String[] {"handler_ref", r.handlerRef()});
        texts.add(new String[] {"payload_content_type", r.payloadContentType()});
        texts.add(new String[] {"handler_version", r.handlerVersion().orElse("")});
        texts.add(new String[] {"idempotency_key", r.idempotencyKey().orElse("")});
        texts.add(new String[] {"flow_key", r.flowKey().orElse("")});
        r.headers().forEach((k, v) -> {
            texts.add(new String[] {"headers", k});
            texts.add(new String[] {"headers", v});
        });
        for (String[] t : texts) {
            String why = badText(t[1]);
            if (why != null) {
                throw new RdqException("INVALID_FIELD", t[0], why);
            }
        }
    }

    private static String badText(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == 0) {
                return "contains U+0000, which PostgreSQL text cannot hold: submit this task through rdq's API";
            }
            if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                return "holds a lone surrogate, which UTF-8 cannot encode";
            }
        }
        return null;
    }

    /**
     * The refusal {@code e} carries, or null: SQLSTATE 22023 and a message
     * whose first line holds {@code CODE: field: why} (after the driver's
     * severity prefix). The field is the error's DETAIL; from drivers that
     * append it as PgJDBC does ({@code "\n  Detail: …"}) it is taken as is,
     * so a header key holding ": " is named whole.
     */
    private static RdqException refusal(SQLException e) {
        String message = e.getMessage();
        if (!"22023".equals(e.getSQLState()) || message == null) {
            return null;
        }
        int nl = message.indexOf('\n');
        String first = nl < 0 ? message : message.substring(0, nl);
        for (String code : CODES) {
            int at = first.indexOf(code + ": ");
            if (at != 0 && (at < 2 || !first.startsWith(": ", at - 2))) {
                continue;
            }
            String rest = first.substring(at + code.length() + 2);
            String field = detail(message);
            if (field == null || !rest.startsWith(field + ": ")) {
                int colon = rest.indexOf(": ");
                field = colon < 0 ? null : rest.substring(0, colon);
            }
            String why = field == null ? rest : rest.substring(field.length() + 2);
            return new RdqException(code, field, why, 0, e);
        }
        return new RdqException("INVALID_ARGUMENT", null, first, 0, e);
    }

    /** The DETAIL line PgJDBC appends to a server error's message, or null. */
    static String detail(String message) {
        int at = message.indexOf("\n  Detail: ");
        if (at < 0) {
            return null;
        }
        int from = at + "\n  Detail: ".length();
        int end = message.indexOf('\n', from);
        return end < 0 ? message.substring(from) : message.substring(from, end);
    }
}
