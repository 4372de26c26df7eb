// Package pg submits rdq tasks inside the caller's own PostgreSQL
// transaction, on an rdq store's schema (docs/stores/postgres.md,
// "Submitting inside your transaction"): the task exists exactly when that
// transaction commits, and workers waiting on its queue are woken at the
// commit. Nothing goes through `rdq serve`; the statement calls the
// schema's SCHEMA.submit function, which writes the row, the queue count
// and the wake-up an rdq node writes, with the same canonical envelope.
//
//	tx, err := db.BeginTx(ctx, nil)
//	…
//	id, err := pg.Submit(ctx, tx, "rdq", rdq.Task{Queue: "emails", HandlerRef: "send-welcome", …})
//	…
//	err = tx.Commit()
//
// Submit takes database/sql (*sql.Tx, *sql.Conn, *sql.DB); SubmitPgx takes
// pgx v5 (pgx.Tx, *pgx.Conn, *pgxpool.Pool). Both run one statement and
// map its refusals to *rdq.Error values with rdq's stable codes.
//
// Complete and CompletePgx are the other end ("Completing inside your
// transaction"): a handler settles its task's success in the transaction
// that holds its writes, fenced by its claim's lease token
// (rdq.LeaseToken(ctx)), then tells the worker with rdq.SettledElsewhere(ctx).
//
// This package is a module of its own (rdq.dev/sdk/go/pg), not a package of
// rdq.dev/sdk/go: it imports pgx v5 (pgx.Row for SubmitPgx, and pgconn's
// error type to read a refusal's code and field, which database/sql hands
// back unchanged when the driver is pgx's stdlib), and its tests need
// PostgreSQL drivers. Kept apart, a program that only talks to `rdq serve`
// never has pgx in its module graph.
package pg
