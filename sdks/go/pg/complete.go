package pg

// Completing inside the caller's transaction (docs/stores/postgres.md,
// "Completing inside your transaction"): a handler settles its task's
// success with its own writes, fenced by the lease token of its claim.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// SQLExecer is what Complete runs its statement on: *sql.Tx (the usual
// case), *sql.Conn or *sql.DB.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PgxExecer is what CompletePgx runs its statement on: pgx.Tx (the usual
// case), *pgx.Conn, *pgxpool.Pool or *pgxpool.Conn.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Complete settles task id as SUCCEEDED through q, a database/sql
// transaction usually, in the rdq store in schema: the task is SUCCEEDED
// exactly when the transaction commits. leaseToken is the one its claim
// handed out; in a worker's handler, rdq.LeaseToken(ctx) answers it, and
// rdq.SettledElsewhere(ctx) after the commit keeps the worker from settling
// the task again.
//
// Refusals are *rdq.Error values (Status 0): LEASE_LOST when the claim is no
// longer the task's (its lease lapsed and another worker claimed it, or the
// token was not issued for it), TASK_NOT_FOUND, and INVALID_FIELD (Field
// "id" or "lease_token") for a malformed id or token. Those PostgreSQL
// raises leave the transaction aborted: roll it back, and the handler's
// writes with it. A malformed id or token and a bad schema name are refused
// before anything is sent, leaving the transaction as it was. Other failures
// are the driver's errors, wrapped.
func Complete(ctx context.Context, q SQLExecer, schema, id, leaseToken string) error {
	if err := checkComplete(schema, id, leaseToken); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, completeStatement(schema), id, leaseToken); err != nil {
		return completeRefusal(schema, err)
	}
	return nil
}

// CompletePgx is Complete on pgx v5: q is a pgx.Tx usually.
func CompletePgx(ctx context.Context, q PgxExecer, schema, id, leaseToken string) error {
	if err := checkComplete(schema, id, leaseToken); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, completeStatement(schema), id, leaseToken); err != nil {
		return completeRefusal(schema, err)
	}
	return nil
}

// CompleteStatement is the statement Complete and CompletePgx run for
// schema (which must be a valid rdq schema name): the task id and the lease
// token as its two parameters.
func CompleteStatement(schema string) (string, error) {
	if err := checkSchema(schema); err != nil {
		return "", err
	}
	return completeStatement(schema), nil
}

func completeStatement(schema string) string {
	return "SELECT " + schema + ".complete($1::text, $2::text)"
}

func checkComplete(schema, id, leaseToken string) error {
	if err := checkSchema(schema); err != nil {
		return err
	}
	if !envelope.IsValidID(id) {
		return &rdq.Error{Code: rdq.CodeInvalidField, Field: "id", Detail: fmt.Sprintf("%q is not a task id", id)}
	}
	if !isLeaseToken(leaseToken) {
		return &rdq.Error{Code: rdq.CodeInvalidField, Field: "lease_token", Detail: "is not a lease token"}
	}
	return nil
}

// isLeaseToken holds token to the text form of a lease token: the claim
// number (a u32) and its MAC, 32 lower-case hex digits, joined by a dot.
func isLeaseToken(token string) bool {
	claim, mac, ok := strings.Cut(token, ".")
	if !ok || claim == "" || len(claim) > 10 || len(mac) != 32 {
		return false
	}
	for i := 0; i < len(claim); i++ {
		if claim[i] < '0' || claim[i] > '9' {
			return false
		}
	}
	if n, err := strconv.ParseUint(claim, 10, 64); err != nil || n > 1<<32-1 {
		return false
	}
	for i := 0; i < len(mac); i++ {
		if c := mac[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// completeRefusal is the error of a failed SCHEMA.complete call: its
// refusal with rdq's code (the hint) and field (the detail), or the
// driver's error.
func completeRefusal(schema string, err error) error {
	var db *pgconn.PgError
	if !errors.As(err, &db) {
		return fmt.Errorf("rdq: %s.complete: %w", schema, err)
	}
	switch {
	case db.Code == "55000" && db.Hint == rdq.CodeLeaseLost,
		db.Code == "P0002" && db.Hint == rdq.CodeTaskNotFound,
		db.Code == "22023" && db.Hint == rdq.CodeInvalidField:
	default:
		return fmt.Errorf("rdq: %s.complete: %w", schema, err)
	}
	// The message is "CODE: why", or "CODE: field: why" for INVALID_FIELD.
	why := strings.TrimPrefix(db.Message, db.Hint+": ")
	field := db.Detail
	if db.Hint == rdq.CodeInvalidField {
		why = strings.TrimPrefix(why, field+": ")
	}
	return &rdq.Error{Code: db.Hint, Field: field, Detail: why}
}
