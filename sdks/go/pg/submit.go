package pg

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// SQLQueryer is what Submit runs its statement on: *sql.Tx (the usual
// case), *sql.Conn or *sql.DB.
type SQLQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// PgxQueryer is what SubmitPgx runs its statement on: pgx.Tx (the usual
// case), *pgx.Conn, *pgxpool.Pool or *pgxpool.Conn.
type PgxQueryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Submit submits t through q, a database/sql transaction usually, into the
// rdq store in schema; it answers the new task's id, or the id of the task
// already holding t.IdempotencyKey in t.Queue. The task exists once the
// transaction commits, and not if it rolls back.
//
// Bad input is refused with an *rdq.Error (Status 0) carrying rdq's stable
// code and the field's path: INVALID_QUEUE_NAME, INVALID_HANDLER_REF,
// RESERVED_HEADER, PAYLOAD_TOO_LARGE, INVALID_FIELD; a task with Unique set
// is refused with UNSUPPORTED before anything is sent (the PostgreSQL store
// keeps no unique keys yet, docs/uniqueness.md). Those PostgreSQL
// refuses leave the transaction aborted, as any failed statement does: roll
// it back. Text PostgreSQL cannot hold (U+0000, invalid UTF-8) and a bad
// schema name are refused before anything is sent, leaving the transaction
// as it was. Other failures are the driver's errors, wrapped, so a
// serialization failure (SQLSTATE 40001) is still seen as one.
//
// A second transaction submitting the same idempotency key waits for the
// first: it answers the first one's task if that commits, and writes its own
// if it rolls back.
//
// The refusal's code and field are read from pgx's *pgconn.PgError, which
// pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib) returns; with
// another driver a refusal comes back as that driver's error.
func Submit(ctx context.Context, q SQLQueryer, schema string, t rdq.Task) (string, error) {
	stmt, args, err := prepare(schema, t)
	if err != nil {
		return "", err
	}
	var id string
	if err := q.QueryRowContext(ctx, stmt, args...).Scan(&id); err != nil {
		return "", refusal(schema, err)
	}
	return checkedID(schema, id)
}

// SubmitPgx is Submit on pgx v5: q is a pgx.Tx usually.
func SubmitPgx(ctx context.Context, q PgxQueryer, schema string, t rdq.Task) (string, error) {
	stmt, args, err := prepare(schema, t)
	if err != nil {
		return "", err
	}
	var id string
	if err := q.QueryRow(ctx, stmt, args...).Scan(&id); err != nil {
		return "", refusal(schema, err)
	}
	return checkedID(schema, id)
}

// Statement is the statement Submit and SubmitPgx run for schema (which
// must be a valid rdq schema name): ten parameters, in the order of
// SCHEMA.submit. Other clients run the same text.
func Statement(schema string) (string, error) {
	if err := checkSchema(schema); err != nil {
		return "", err
	}
	return statement(schema), nil
}

func statement(schema string) string {
	return "SELECT " + schema + ".submit($1::text, $2::text, $3::bytea, $4::text, $5::text::jsonb, " +
		"$6::int4, $7::int8, $8::text, $9::text, $10::text)"
}

// maxSchemaLen is the PostgreSQL store's limit on its schema name.
const maxSchemaLen = 48

// checkSchema holds schema to the PostgreSQL store's rule: a plain
// lower-case identifier, so it can be written into the statement as is.
func checkSchema(schema string) error {
	ok := schema != "" && len(schema) <= maxSchemaLen && !strings.HasPrefix(schema, "pg_")
	for i := 0; ok && i < len(schema); i++ {
		c := schema[i]
		ok = c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9'
	}
	if ok {
		return nil
	}
	return &rdq.Error{Code: rdq.CodeInvalidArgument, Detail: fmt.Sprintf(
		"schema %q is not a plain name: use [a-z_][a-z0-9_]*, at most %d bytes, not starting with pg_",
		schema, maxSchemaLen)}
}

// prepare checks what must be checked before the statement and builds its
// arguments. Empty optional fields are NULL, as in the HTTP API.
func prepare(schema string, t rdq.Task) (string, []any, error) {
	if err := checkSchema(schema); err != nil {
		return "", nil, err
	}
	if t.Unique != nil {
		// SCHEMA.submit has no unique key to take: refused rather than
		// written without the key.
		return "", nil, &rdq.Error{Code: rdq.CodeUnsupported, Field: "unique",
			Detail: "the PostgreSQL store keeps no unique keys yet (capability unique, docs/uniqueness.md)"}
	}
	headers := t.Headers
	if t.CorrelationID != "" {
		headers = make(map[string]string, len(t.Headers)+1)
		for k, v := range t.Headers {
			headers[k] = v
		}
		headers[envelope.CorrelationHeader] = t.CorrelationID
	}
	if err := checkText(t, headers); err != nil {
		return "", nil, err
	}
	if t.Delay < 0 {
		// Milliseconds() would round a delay under a millisecond up to 0.
		return "", nil, &rdq.Error{Code: rdq.CodeInvalidField, Field: "delay_ms", Detail: "the delay must not be negative"}
	}
	headerJSON := []byte("{}")
	if len(headers) > 0 {
		var err error
		if headerJSON, err = json.Marshal(headers); err != nil {
			return "", nil, err
		}
	}
	payload := t.Payload
	if payload == nil {
		payload = []byte{} // nil is NULL, which the function refuses
	}
	contentType := t.ContentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	args := []any{
		t.Queue,
		t.HandlerRef,
		payload,
		contentType,
		string(headerJSON),
		int32(t.Priority),
		t.Delay.Milliseconds(),
		orNull(t.IdempotencyKey),
		orNull(t.HandlerVersion),
		orNull(t.FlowKey),
	}
	return statement(schema), args, nil
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// checkText refuses U+0000 and invalid UTF-8 in any text of t: PostgreSQL's
// text and jsonb cannot hold the one, and refuse the other (a submit through
// rdq serve takes U+0000: the envelope is stored as bytes).
func checkText(t rdq.Task, headers map[string]string) error {
	texts := []struct{ field, text string }{
		{"queue", t.Queue},
		{"handler_ref", t.HandlerRef},
		{"payload_content_type", t.ContentType},
		{"handler_version", t.HandlerVersion},
		{"idempotency_key", t.IdempotencyKey},
		{"flow_key", t.FlowKey},
	}
	for k, v := range headers {
		texts = append(texts, struct{ field, text string }{"headers", k}, struct{ field, text string }{"headers", v})
	}
	for _, x := range texts {
		switch {
		case strings.IndexByte(x.text, 0) >= 0:
			return &rdq.Error{Code: rdq.CodeInvalidField, Field: x.field,
				Detail: "contains U+0000, which PostgreSQL text cannot hold: submit this task through rdq's API"}
		case !utf8.ValidString(x.text):
			return &rdq.Error{Code: rdq.CodeInvalidField, Field: x.field, Detail: "is not valid UTF-8"}
		}
	}
	return nil
}

// refusal is the error of a failed SCHEMA.submit call: its refusal with
// rdq's code and field (SQLSTATE 22023, the code as the hint, the field as
// the detail, "CODE: field: why" as the message), or the driver's error.
func refusal(schema string, err error) error {
	var db *pgconn.PgError
	if !errors.As(err, &db) || db.Code != "22023" {
		return fmt.Errorf("rdq: %s.submit: %w", schema, err)
	}
	switch db.Hint {
	case rdq.CodeInvalidQueueName, rdq.CodeInvalidHandlerRef, rdq.CodeReservedHeader,
		rdq.CodePayloadTooLarge, rdq.CodeInvalidField:
	default:
		return &rdq.Error{Code: rdq.CodeInvalidArgument, Detail: db.Message}
	}
	why := db.Message
	if parts := strings.SplitN(why, ": ", 3); len(parts) == 3 {
		why = parts[2]
	}
	return &rdq.Error{Code: db.Hint, Field: db.Detail, Detail: why}
}

func checkedID(schema, id string) (string, error) {
	if !envelope.IsValidID(id) {
		return "", &rdq.Error{Code: rdq.CodeStoreUnavailable, Detail: fmt.Sprintf("%s.submit answered %q", schema, id)}
	}
	return id, nil
}
