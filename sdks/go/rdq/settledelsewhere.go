package rdq

// A task settled by its handler: with the PostgreSQL store a handler can
// complete its task in its own transaction (rdq.dev/sdk/go/pg's Complete,
// docs/stores/postgres.md, "Completing inside your transaction"), so the
// success commits with the handler's writes. The handler reads the lease
// token for that from its context, and once the transaction committed tells
// the worker, which then sends no settle: a second one would be refused
// with LEASE_LOST.

import "context"

// runKey is the context key of the run a handler's context belongs to.
type runKey struct{}

// LeaseToken answers the lease token of the task whose handler ctx belongs
// to (a handler's context, or one derived from it), and false for any other
// context. The task's id is the handler's task.ID.
func LeaseToken(ctx context.Context) (string, bool) {
	r, ok := ctx.Value(runKey{}).(*run)
	if !ok {
		return "", false
	}
	return r.task.LeaseToken, true
}

// SettledElsewhere tells the worker that the task whose handler ctx belongs
// to was settled by the handler itself (its completion committed with the
// handler's own writes): the worker sends no settle for it, whatever the
// handler returns, and stops extending its lease. Call it once that
// transaction has committed; on any other context it does nothing.
func SettledElsewhere(ctx context.Context) {
	r, ok := ctx.Value(runKey{}).(*run)
	if !ok {
		return
	}
	r.worker.mu.Lock()
	r.settledElsewhere = true
	r.finished = true // the lease is spent: no further extension
	r.worker.mu.Unlock()
}
