package dev.rdq.pg;

import dev.rdq.RdqException;
import dev.rdq.envelope.Ulid;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * Completes a claimed task inside the caller's own PostgreSQL transaction,
 * on an rdq store's schema ({@code docs/stores/postgres.md}, "Completing
 * inside your transaction"): the task is SUCCEEDED exactly when the
 * connection's transaction commits, with the handler's own writes. The
 * statement calls the schema's {@code SCHEMA.complete} function, fenced like
 * every settle by the lease token the claim handed out.
 *
 * <p>In a worker's handler, {@code TaskContext.current()} gives the task's
 * id and lease token; after the commit, {@code TaskContext.settledElsewhere()}
 * keeps the worker from settling the task again.
 *
 * <p>Plain JDBC, as {@link TransactionalSubmit}: a refusal is read from its
 * SQLSTATE and its message, {@code CODE: why}, which every driver passes on.
 */
public final class TransactionalComplete {
    /** A lease token's text: the claim number (a u32) and its MAC in lower-case hex. */
    private static final Pattern LEASE_TOKEN = Pattern.compile("[0-9]{1,10}\\.[0-9a-f]{32}");

    /** The codes {@code SCHEMA.complete} refuses with, by SQLSTATE. */
    private static final Map<String, String> CODES = Map.of(
            "55000", "LEASE_LOST", "P0002", "TASK_NOT_FOUND", "22023", "INVALID_FIELD");

    private TransactionalComplete() {}

    /**
     * Settles task {@code id} as SUCCEEDED on {@code connection} (autocommit
     * off: the completion is part of its transaction) in the rdq store in
     * {@code schema}, fenced by {@code leaseToken}, the one its claim handed
     * out.
     *
     * @throws RdqException {@code LEASE_LOST} when the claim is no longer the
     *     task's (its lease lapsed and another worker claimed it, or the
     *     token was not issued for it), {@code TASK_NOT_FOUND}, {@code
     *     INVALID_FIELD} (field {@code id} or {@code lease_token}) for a
     *     malformed id or token, {@code INVALID_ARGUMENT} for a bad schema
     *     name. Those PostgreSQL makes leave the transaction aborted: roll it
     *     back, and the handler's writes with it. A malformed id or token and
     *     a bad schema name are refused before anything is sent, leaving the
     *     transaction as it was.
     * @throws SQLException any other failure, as the driver reported it
     */
    public static void complete(Connection connection, String schema, String id, String leaseToken)
            throws SQLException {
        String sql = statement(schema);
        if (id == null || !Ulid.isValid(id)) {
            throw new RdqException("INVALID_FIELD", "id", (id == null ? "null" : '"' + id + '"') + " is not a task id");
        }
        if (leaseToken == null || !LEASE_TOKEN.matcher(leaseToken).matches()
                || Long.parseLong(leaseToken.substring(0, leaseToken.indexOf('.'))) > 0xFFFF_FFFFL) {
            throw new RdqException("INVALID_FIELD", "lease_token", "is not a lease token");
        }
        try (PreparedStatement ps = connection.prepareStatement(sql)) {
            ps.setString(1, id);
            ps.setString(2, leaseToken);
            ps.execute();
        } catch (SQLException e) {
            RdqException refused = refusal(e);
            if (refused != null) {
                throw refused;
            }
            throw e;
        }
    }

    /**
     * The statement {@link #complete} prepares for {@code schema}: the task id
     * and the lease token as its two parameters.
     *
     * @throws RdqException {@code INVALID_ARGUMENT} unless {@code schema} is a
     *     valid rdq schema name, as for {@link TransactionalSubmit#statement}
     */
    public static String statement(String schema) {
        TransactionalSubmit.checkSchema(schema);
        return "SELECT " + schema + ".complete(?::text, ?::text)";
    }

    /**
     * The refusal {@code e} carries, or null: one of the SQLSTATEs above and
     * a first line holding {@code CODE: why} (after the driver's severity
     * prefix; {@code CODE: field: why} for {@code INVALID_FIELD}). The field
     * is the DETAIL when the driver appends it.
     */
    private static RdqException refusal(SQLException e) {
        String code = CODES.get(e.getSQLState());
        String message = e.getMessage();
        if (code == null || message == null) {
            return null;
        }
        int nl = message.indexOf('\n');
        String first = nl < 0 ? message : message.substring(0, nl);
        int at = first.indexOf(code + ": ");
        if (at < 0) {
            return null;
        }
        String why = first.substring(at + code.length() + 2);
        String field = TransactionalSubmit.detail(message);
        if (field == null) {
            field = code.equals("TASK_NOT_FOUND") ? "id" : "lease_token";
            if (code.equals("INVALID_FIELD")) {
                int colon = why.indexOf(": ");
                field = colon < 0 ? null : why.substring(0, colon);
            }
        }
        if (field != null && why.startsWith(field + ": ")) {
            why = why.substring(field.length() + 2);
        }
        return new RdqException(code, field, why, 0, e);
    }
}
