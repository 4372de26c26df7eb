package pg_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/pg"
	"rdq.dev/sdk/go/rdq"
)

func orderTask(queue string) rdq.Task {
	return rdq.Task{
		Queue:       queue,
		HandlerRef:  "emails.send",
		Payload:     []byte(`{"to":"a@example.com"}`),
		ContentType: "application/json",
	}
}

func TestARolledBackSubmitNeverExistsAndACommittedOneWakesWorkers(t *testing.T) {
	pool := newPool(t)
	for _, d := range drivers(t, pool) {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			schema := newSchema(t, pool)
			listener, err := pgx.Connect(ctx, databaseURL())
			if err != nil {
				t.Fatal(err)
			}
			defer listener.Close(ctx)
			if _, err := listener.Exec(ctx, "LISTEN rdq_"+schema); err != nil {
				t.Fatal(err)
			}
			wakeUp := func(wait time.Duration) (string, bool) {
				ctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				n, err := listener.WaitForNotification(ctx)
				if err != nil {
					return "", false
				}
				return n.Payload, true
			}

			x := d.begin(t, ctx)
			id, err := x.submit(ctx, schema, orderTask("orders"))
			if err != nil {
				t.Fatal(err)
			}
			if !envelope.IsValidID(id) {
				t.Fatalf("id %q is not a task id", id)
			}
			if stored(t, pool, schema, id) != nil {
				t.Fatal("the task is seen before the commit")
			}
			if err := x.rollback(); err != nil {
				t.Fatal(err)
			}
			if n := rows(t, pool, schema); n != 0 {
				t.Fatalf("%d tasks after a rollback", n)
			}
			if note, woke := wakeUp(300 * time.Millisecond); woke {
				t.Fatalf("a rolled-back submit woke workers: %q", note)
			}

			x = d.begin(t, ctx)
			if err := x.exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			id, err = x.submit(ctx, schema, orderTask("orders"))
			if err != nil {
				t.Fatal(err)
			}
			if err := x.commit(); err != nil {
				t.Fatal(err)
			}
			note, woke := wakeUp(2 * time.Second)
			if !woke || note != "w sql orders" {
				t.Fatalf("no wake-up within 2 s of the commit (%q)", note)
			}
			b := stored(t, pool, schema, id)
			env, err := envelope.Decode(b)
			if err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			again, err := env.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("not canonical:\nstored  %s\nencoded %s", b, again)
			}

			claimed, err := serve(t, schema).Claim(ctx, "orders", 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(claimed) != 1 || claimed[0].ID != id {
				t.Fatalf("claimed %+v, want task %s", claimed, id)
			}
		})
	}
}

// The row is the one `rdq serve` writes for the same task: its envelope
// differs only in the id and the instants.
func TestTheStoredEnvelopeIsTheOneRdqServeWrites(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := newSchema(t, pool)
	client := serve(t, schema)
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	tasks := []struct {
		name string
		task rdq.Task
	}{
		{"plain", orderTask("plain")},
		{"bytes", rdq.Task{Queue: "bytes", HandlerRef: "blob.store", Payload: allBytes}},
		{"headed", rdq.Task{
			Queue: "headed", HandlerRef: "emails.send", Payload: []byte(`{}`), ContentType: "application/json",
			Headers: map[string]string{
				"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				"Z-upper":         "sorted before lower-case",
				"a\"quote\\slash": "line\nbreak\ttab\u0001\u007f é ✓ 𝄞 / <&>",
				"":                "",
			},
			HandlerVersion: "2026.12 \"beta\"",
			Priority:       255,
			Delay:          90 * time.Second,
		}},
		{"keyed", rdq.Task{
			Queue: "keyed", HandlerRef: "flows.run", Payload: []byte("x"),
			FlowKey: "tenant:42/eu@x=y+z", IdempotencyKey: "order-1", CorrelationID: "req-7",
		}},
		{"empty", rdq.Task{Queue: "empty", HandlerRef: "noop"}},
	}
	drivers := drivers(t, pool)
	for i, c := range tasks {
		task := c.task
		t.Run(c.name, func(t *testing.T) {
			d := drivers[i%len(drivers)]
			x := d.begin(t, ctx)
			id, err := x.submit(ctx, schema, task)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.commit(); err != nil {
				t.Fatal(err)
			}
			b := stored(t, pool, schema, id)
			env, err := envelope.Decode(b)
			if err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if again, _ := env.Encode(); !bytes.Equal(again, b) {
				t.Fatalf("not canonical:\nstored  %s\nencoded %s", b, again)
			}
			if got := env.NextAttemptAt.Sub(env.CreatedAt); got != task.Delay {
				t.Fatalf("due %v after its creation, want %v", got, task.Delay)
			}

			// The same task through rdq serve, in a queue of its own (the
			// idempotency key is the queue's), with the SQL task's id and instants.
			twin := task
			twin.Queue = task.Queue + "-http"
			sub, err := client.Submit(ctx, twin)
			if err != nil {
				t.Fatal(err)
			}
			node := sub.Envelope
			node.ID, node.Queue, node.CreatedAt, node.NextAttemptAt = env.ID, env.Queue, env.CreatedAt, env.NextAttemptAt
			want, err := node.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, b) {
				t.Fatalf("rdq serve and SCHEMA.submit disagree:\nserve  %s\nsubmit %s", want, b)
			}
			if task.IdempotencyKey != "" {
				again, err := client.Submit(ctx, task)
				if err != nil {
					t.Fatal(err)
				}
				if !again.Existing || again.Envelope.ID != id {
					t.Fatalf("rdq serve answered %s (existing %v) for the key of %s", again.Envelope.ID, again.Existing, id)
				}
			}
		})
	}
}

func TestConcurrentTransactionsWithOneIdempotencyKeyMakeOneTask(t *testing.T) {
	pool := newPool(t)
	for _, d := range drivers(t, pool) {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			schema := newSchema(t, pool)
			task := orderTask("orders")
			task.IdempotencyKey = "order-7"
			for _, firstCommits := range []bool{true, false} {
				a := d.begin(t, ctx)
				first, err := a.submit(ctx, schema, task)
				if err != nil {
					t.Fatal(err)
				}
				type answer struct {
					id  string
					err error
				}
				second := make(chan answer, 1)
				b := d.begin(t, ctx)
				go func() {
					id, err := b.submit(ctx, schema, task)
					if err == nil {
						err = b.commit()
					}
					second <- answer{id, err}
				}()
				select {
				case got := <-second:
					t.Fatalf("the second submit did not wait for the first: %+v", got)
				case <-time.After(300 * time.Millisecond):
				}
				if firstCommits {
					if err := a.commit(); err != nil {
						t.Fatal(err)
					}
				} else if err := a.rollback(); err != nil {
					t.Fatal(err)
				}
				got := <-second
				switch {
				case got.err != nil:
					t.Fatal(got.err)
				case firstCommits && got.id != first:
					t.Fatalf("two tasks for one key: %s and %s", first, got.id)
				case !firstCommits && got.id == first:
					t.Fatal("the key went to a task that was rolled back")
				}
				if n := rows(t, pool, schema); n != 1 {
					t.Fatalf("%d tasks, want 1", n)
				}
				if _, err := pool.Exec(ctx, "DELETE FROM "+schema+".tasks"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestBadInputIsRefusedWithRdqCodesAndWritesNothing(t *testing.T) {
	pool := newPool(t)
	with := func(change func(*rdq.Task)) rdq.Task {
		task := orderTask("x")
		change(&task)
		return task
	}
	bad := []struct {
		code, field string
		task        rdq.Task
		// local: refused before anything is sent, so the transaction goes on.
		local bool
	}{
		{"INVALID_QUEUE_NAME", "queue", with(func(t *rdq.Task) { t.Queue = "Orders" }), false},
		{"INVALID_QUEUE_NAME", "queue", with(func(t *rdq.Task) { t.Queue = "" }), false},
		{"INVALID_QUEUE_NAME", "queue", with(func(t *rdq.Task) { t.Queue = ".." }), false},
		{"INVALID_QUEUE_NAME", "queue", with(func(t *rdq.Task) { t.Queue = strings.Repeat("q", 241) }), false},
		{"INVALID_HANDLER_REF", "handler_ref", with(func(t *rdq.Task) { t.HandlerRef = "send email" }), false},
		{"RESERVED_HEADER", "headers.RDQ.submitted_by", with(func(t *rdq.Task) { t.Headers = map[string]string{"RDQ.submitted_by": "me"} }), false},
		{"INVALID_FIELD", "payload_content_type", with(func(t *rdq.Task) { t.ContentType = strings.Repeat("c", 256) }), false},
		{"INVALID_FIELD", "handler_version", with(func(t *rdq.Task) { t.HandlerVersion = strings.Repeat("v", 256) }), false},
		{"INVALID_FIELD", "idempotency_key", with(func(t *rdq.Task) { t.IdempotencyKey = strings.Repeat("k", 256) }), false},
		{"INVALID_FIELD", "flow_key", with(func(t *rdq.Task) { t.FlowKey = "a b" }), false},
		{"INVALID_FIELD", "flow_key", with(func(t *rdq.Task) { t.FlowKey = strings.Repeat("k", 129) }), false},
		{"PAYLOAD_TOO_LARGE", "payload", with(func(t *rdq.Task) { t.Payload = bytes.Repeat([]byte{7}, 1<<20) }), false},
		{"INVALID_FIELD", "delay_ms", with(func(t *rdq.Task) { t.Delay = -time.Microsecond }), true},
		{"INVALID_FIELD", "queue", with(func(t *rdq.Task) { t.Queue = "a\x00b" }), true},
		{"INVALID_FIELD", "queue", with(func(t *rdq.Task) { t.Queue = "a\xffb" }), true},
		{"INVALID_FIELD", "handler_ref", with(func(t *rdq.Task) { t.HandlerRef = "a\x00" }), true},
		{"INVALID_FIELD", "payload_content_type", with(func(t *rdq.Task) { t.ContentType = "text/\x00" }), true},
		{"INVALID_FIELD", "handler_version", with(func(t *rdq.Task) { t.HandlerVersion = "\x00" }), true},
		{"INVALID_FIELD", "idempotency_key", with(func(t *rdq.Task) { t.IdempotencyKey = "k\x00" }), true},
		{"INVALID_FIELD", "flow_key", with(func(t *rdq.Task) { t.FlowKey = "\x00" }), true},
		{"INVALID_FIELD", "headers", with(func(t *rdq.Task) { t.Headers = map[string]string{"k\x00": "v"} }), true},
		{"INVALID_FIELD", "headers", with(func(t *rdq.Task) { t.Headers = map[string]string{"k": "v\x00"} }), true},
		{"INVALID_FIELD", "headers", with(func(t *rdq.Task) { t.CorrelationID = "\x00" }), true},
		// The PostgreSQL store keeps no unique keys yet: refused, not written without one.
		{"UNSUPPORTED", "unique", with(func(t *rdq.Task) { t.Unique = &rdq.Unique{Key: "order-1"} }), true},
	}
	for _, d := range drivers(t, pool) {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			schema := newSchema(t, pool)
			for _, c := range bad {
				x := d.begin(t, ctx)
				_, err := x.submit(ctx, schema, c.task)
				var e *rdq.Error
				if !errors.As(err, &e) || e.Code != c.code || e.Field != c.field || e.Detail == "" {
					t.Errorf("%s %s: got %v, want %s naming %s", c.code, c.field, err, c.code, c.field)
				}
				// A refusal PostgreSQL made aborted the transaction; one made
				// before sending left it as it was.
				if err := x.exec(ctx, "SELECT 1"); (err == nil) != c.local {
					t.Errorf("%v: after it the transaction answers %v", e, err)
				}
				if err := x.rollback(); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range []string{"", "Rdq", "pg_rdq", "rdq; DROP TABLE x", "1rdq", strings.Repeat("s", 49)} {
				x := d.begin(t, ctx)
				if _, err := x.submit(ctx, s, orderTask("x")); rdq.ErrorCode(err) != rdq.CodeInvalidArgument {
					t.Errorf("schema %q: got %v, want INVALID_ARGUMENT", s, err)
				}
				_ = x.rollback()
			}
			if _, err := pg.Statement(strings.Repeat("s", 48)); err != nil {
				t.Errorf("a 48-byte schema name is refused: %v", err)
			}

			// A queue's own limit applies.
			if _, err := serve(t, schema).SetQueueConfig(ctx, "small", map[string]any{"max_envelope_bytes": 600}); err != nil {
				t.Fatal(err)
			}
			big := orderTask("small")
			big.Payload = bytes.Repeat([]byte("x"), 400)
			x := d.begin(t, ctx)
			if _, err := x.submit(ctx, schema, big); rdq.ErrorCode(err) != rdq.CodePayloadTooLarge {
				t.Fatalf("a 400-byte payload in a queue of 600-byte envelopes: %v", err)
			}
			_ = x.rollback()
			big.Payload = big.Payload[:100]
			x = d.begin(t, ctx)
			if _, err := x.submit(ctx, schema, big); err != nil {
				t.Fatal(err)
			}
			if err := x.commit(); err != nil {
				t.Fatal(err)
			}
			if n := rows(t, pool, schema); n != 1 {
				t.Fatalf("%d tasks, want the one accepted", n)
			}
		})
	}
}
