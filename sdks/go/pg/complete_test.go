package pg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/pg"
	"rdq.dev/sdk/go/rdq"
)

// A handler that writes its row and completes its task in one transaction:
// the task is SUCCEEDED after one attempt, the row exists, and the worker
// settles nothing (a settle would be refused, and reported to OnError). One
// handler slot and three tasks: on the Work stream the later tasks come only
// if the worker gave the credit back without a settle.
func TestAHandlerCompletingInItsTransactionSucceedsOnceAndTheWorkerSettlesNothing(t *testing.T) {
	pool := newPool(t)
	for _, tr := range []rdq.Transport{rdq.TransportHTTP, rdq.TransportGRPC} {
		t.Run(tr.String(), func(t *testing.T) {
			ctx := context.Background()
			schema := newSchema(t, pool)
			client := serve(t, schema)
			if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".receipts (task_id text PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			const tasks = 3
			ids := make([]string, tasks)
			for i := range ids {
				sub, err := client.Submit(ctx, orderTask("receipts"))
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = sub.Envelope.ID
			}

			done := make(chan string, tasks)
			reg := rdq.NewRegistry()
			reg.Register("emails.send", func(ctx context.Context, task envelope.Envelope) error {
				token, ok := rdq.LeaseToken(ctx)
				if !ok {
					return errors.New("the handler's context holds no lease token")
				}
				if err := writeAndComplete(ctx, pool, schema, task.ID, token); err != nil {
					return err
				}
				rdq.SettledElsewhere(ctx)
				done <- task.ID
				return nil
			})
			var mu sync.Mutex
			var reported []error
			w, err := rdq.NewWorker(client, rdq.WorkerConfig{
				Transport: tr, Queues: []string{"receipts"}, Registry: reg, Concurrency: 1,
				PollInterval: 20 * time.Millisecond,
				OnError: func(err error) {
					mu.Lock()
					defer mu.Unlock()
					reported = append(reported, err)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- w.Run(runCtx) }()
			timeout := time.After(30 * time.Second)
			for range tasks {
				select {
				case <-done:
				case <-timeout:
					stop()
					t.Fatal("the worker did not run every task within 30 s")
				}
			}
			stop()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}

			for _, id := range ids {
				env, err := client.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if env.Status != envelope.StatusSucceeded || len(env.Attempts) != 1 {
					t.Errorf("task %s: %s after %d attempts, want SUCCEEDED after 1", id, env.Status, len(env.Attempts))
				}
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".receipts WHERE task_id = $1", id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Errorf("task %s: %d rows, want 1", id, n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, err := range reported {
				t.Errorf("reported: %v", err)
			}
		})
	}
}

func writeAndComplete(ctx context.Context, pool *pgxpool.Pool, schema, id, token string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".receipts VALUES ($1)", id); err != nil {
		return err
	}
	if err := pg.CompletePgx(ctx, tx, schema, id, token); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// A worker whose lease lapsed while its task was claimed again gets
// LEASE_LOST, and its transaction rolls back; the current claim's token
// completes the task, once.
func TestACompleteWithAStaleLeaseTokenIsLeaseLost(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := newSchema(t, pool)
	client := serve(t, schema)
	if _, err := client.Submit(ctx, orderTask("orders")); err != nil {
		t.Fatal(err)
	}
	first, err := client.Claim(ctx, "orders", 1, 50*time.Millisecond)
	if err != nil || len(first) != 1 {
		t.Fatalf("claimed %v, %v", first, err)
	}
	var second []rdq.ClaimedTask
	for deadline := time.Now().Add(10 * time.Second); len(second) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the task was not claimed again within 10 s of its lease's end")
		}
		if second, err = client.Claim(ctx, "orders", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	id := first[0].ID

	for _, d := range drivers(t, pool) {
		t.Run(d.name, func(t *testing.T) {
			x := d.begin(t, ctx)
			defer x.rollback()
			err := x.complete(ctx, schema, id, first[0].LeaseToken)
			var e *rdq.Error
			if !errors.As(err, &e) || e.Code != rdq.CodeLeaseLost || e.Field != "lease_token" ||
				!strings.Contains(e.Detail, "no longer held") {
				t.Fatalf("a stale token: %v, want LEASE_LOST on lease_token", err)
			}
		})
	}
	x := drivers(t, pool)[0].begin(t, ctx)
	if err := x.complete(ctx, schema, id, second[0].LeaseToken); err != nil {
		t.Fatal(err)
	}
	if err := x.commit(); err != nil {
		t.Fatal(err)
	}
	env, err := client.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != envelope.StatusSucceeded {
		t.Fatalf("status %s after the current claim's complete, want SUCCEEDED", env.Status)
	}
	x = drivers(t, pool)[1].begin(t, ctx)
	defer x.rollback()
	if err := x.complete(ctx, schema, id, second[0].LeaseToken); !rdq.IsCode(err, rdq.CodeLeaseLost) {
		t.Fatalf("completing twice: %v, want LEASE_LOST", err)
	}
}

func TestACompleteIsRefusedWithRdqCodes(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := newSchema(t, pool)
	client := serve(t, schema)
	sub, err := client.Submit(ctx, orderTask("orders"))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Envelope.ID
	claimed, err := client.Claim(ctx, "orders", 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %v, %v", claimed, err)
	}
	token := claimed[0].LeaseToken
	claim, _, _ := strings.Cut(token, ".")
	forged := claim + "." + strings.Repeat("0", 32)

	cases := []struct {
		name, schema, id, token, code, field string
		sent                                 bool // PostgreSQL refused it: the transaction is aborted
	}{
		{"a bad schema name", "Rdq", id, token, rdq.CodeInvalidArgument, "", false},
		{"a malformed id", schema, "not-an-id", token, rdq.CodeInvalidField, "id", false},
		{"a malformed token", schema, id, "7", rdq.CodeInvalidField, "lease_token", false},
		{"a claim number over 32 bits", schema, id, "4294967296." + strings.Repeat("a", 32), rdq.CodeInvalidField, "lease_token", false},
		{"a forged token", schema, id, forged, rdq.CodeLeaseLost, "lease_token", true},
	}
	for _, d := range drivers(t, pool) {
		for _, c := range cases {
			t.Run(d.name+"/"+c.name, func(t *testing.T) {
				x := d.begin(t, ctx)
				defer x.rollback()
				err := x.complete(ctx, c.schema, c.id, c.token)
				var e *rdq.Error
				if !errors.As(err, &e) || e.Code != c.code || e.Field != c.field || e.Status != 0 {
					t.Fatalf("%v, want %s on %q", err, c.code, c.field)
				}
				if err := x.exec(ctx, "SELECT 1"); (err != nil) != c.sent {
					t.Fatalf("the transaction after the refusal: %v", err)
				}
			})
		}
	}

	// A task gone since its claim: the token is genuine, the task is not there.
	if _, err := pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s.tasks t WHERE %[1]s.task_id_text(t.id) = $1", schema), id); err != nil {
		t.Fatal(err)
	}
	x := drivers(t, pool)[1].begin(t, ctx)
	defer x.rollback()
	if err := x.complete(ctx, schema, id, token); !rdq.IsCode(err, rdq.CodeTaskNotFound) {
		t.Fatalf("a deleted task: %v, want TASK_NOT_FOUND", err)
	}
	if _, err := pg.CompleteStatement("pg_x"); !rdq.IsCode(err, rdq.CodeInvalidArgument) {
		t.Fatalf("CompleteStatement with a bad schema: %v", err)
	}
}
