package rdq_test

// Unique submits (docs/uniqueness.md) against a real `rdq serve`, over both
// submit transports. Only stores with capability `unique` keep unique keys;
// a test store without it is skipped and the memory store stands in.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// hasCapability asks the server at url whether its store has the capability.
func hasCapability(t testing.TB, url, name string) bool {
	t.Helper()
	resp, err := http.Get(url + "/v1/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Capabilities map[string]bool `json:"capabilities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /v1/capabilities: %v", err)
	}
	return body.Capabilities[name]
}

// submitTransports are the ways a client submits; the unique tests run on each.
var submitTransports = []rdq.Transport{rdq.TransportHTTP, rdq.TransportGRPC}

// forEachUniqueStore runs body, once per submit transport (subtests
// store/transport), with a client of a server of its own, on every store
// of the end-to-end tests that has capability unique, and on the memory
// store when one of them has not.
func forEachUniqueStore(t *testing.T, body func(t *testing.T, c *rdq.Client)) {
	run := func(t *testing.T, url string) {
		for _, tr := range submitTransports {
			t.Run(tr.String(), func(t *testing.T) {
				body(t, newClientWith(t, rdq.ClientConfig{URL: url, SubmitTransport: tr}))
			})
		}
	}
	memory := false
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			store, schema := b.store(t)
			s := startServer(t, store)
			s.schema = schema
			t.Cleanup(s.stop)
			if !hasCapability(t, s.url, "unique") {
				memory = true
				t.Skipf("the %s store has no capability unique (yet): the memory store stands in", b.name)
			}
			run(t, s.url)
		})
	}
	if memory {
		t.Run("memory", func(t *testing.T) {
			s := startServer(t, "memory")
			t.Cleanup(s.stop)
			if !hasCapability(t, s.url, "unique") {
				t.Fatal("the memory store has no capability unique")
			}
			run(t, s.url)
		})
	}
}

// uniqueHeld checks that err is UNIQUE_HELD naming holder, and returns it.
func uniqueHeld(t *testing.T, err error, holder string) *rdq.Error {
	t.Helper()
	var e *rdq.Error
	if !errors.As(err, &e) || e.Code != rdq.CodeUniqueHeld || !rdq.IsCode(err, rdq.CodeUniqueHeld) {
		t.Fatalf("got %v, want UNIQUE_HELD", err)
	}
	if e.Holder != holder || e.Status != http.StatusConflict || e.Detail == "" {
		t.Fatalf("UNIQUE_HELD names holder %q (status %d, %q), want %q", e.Holder, e.Status, e.Detail, holder)
	}
	return e
}

// pendingTasks lists the queue's PENDING tasks (none when the queue was
// never written to).
func pendingTasks(t *testing.T, c *rdq.Client, queue string) []envelope.Envelope {
	t.Helper()
	page, err := c.ListTasks(context.Background(), queue, rdq.TaskListOptions{Status: envelope.StatusPending, Limit: 100})
	if rdq.IsCode(err, rdq.CodeQueueNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return page.Items
}

func TestASecondSubmitOfAHeldKeyFailsNamingTheHolder(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		ctx := context.Background()
		q := queueName(t)
		task := func(key string) rdq.Task {
			return rdq.Task{Queue: q, HandlerRef: "charge", Payload: []byte(`{}`), Unique: &rdq.Unique{Key: key}}
		}
		first, err := c.Submit(ctx, task("invoice-7"))
		if err != nil {
			t.Fatal(err)
		}
		if first.Existing {
			t.Fatal("a first unique submit reported an existing task")
		}
		h := first.Envelope.Headers
		if h["rdq.unique_key"] != "invoice-7" || h["rdq.unique_scope"] != "queue" || h["rdq.unique_hold"] != "until_finished" {
			t.Fatalf("the holder's unique headers: %v", h)
		}
		_, err = c.Submit(ctx, task("invoice-7"))
		if e := uniqueHeld(t, err, first.Envelope.ID); e.Hold != string(rdq.HoldUntilFinished) {
			t.Fatalf("UNIQUE_HELD says hold %q, want until_finished", e.Hold)
		}
		if n := len(pendingTasks(t, c, q)); n != 1 {
			t.Fatalf("the refused submit wrote a task: %d pending", n)
		}
		// Another key, and the same key in another queue, are free.
		if _, err := c.Submit(ctx, task("invoice-8")); err != nil {
			t.Fatal(err)
		}
		elsewhere := task("invoice-7")
		elsewhere.Queue = q + "-other"
		if _, err := c.Submit(ctx, elsewhere); err != nil {
			t.Fatalf("the key in another queue: %v", err)
		}

		// Scope handler: one holder per key and handler.
		scoped := func(handler string) rdq.Task {
			return rdq.Task{Queue: q, HandlerRef: handler, Unique: &rdq.Unique{Key: "per-handler", Scope: rdq.UniqueScopeHandler}}
		}
		a := submit(t, c, scoped("a"))
		submit(t, c, scoped("b"))
		_, err = c.Submit(ctx, scoped("a"))
		uniqueHeld(t, err, a.ID)

		// A hold for a duration, sent as hold_ms and named "for:MS".
		timed := rdq.Task{Queue: q, HandlerRef: "h", Unique: &rdq.Unique{Key: "timed", Hold: rdq.HoldFor, Duration: time.Hour}}
		holder := submit(t, c, timed)
		if got := holder.Headers["rdq.unique_hold"]; got != "for:3600000" {
			t.Fatalf("a one-hour hold is stored as %q", got)
		}
		timed.Unique = &rdq.Unique{Key: "timed", Hold: rdq.HoldUntilStarted}
		_, err = c.Submit(ctx, timed)
		if e := uniqueHeld(t, err, holder.ID); e.Hold != "for:3600000" {
			t.Fatalf("UNIQUE_HELD says hold %q, want for:3600000", e.Hold)
		}
	})
}

func TestKeyFromDerivesOneKeyWhateverTheOrderOfThePayloadsMembers(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		ctx := context.Background()
		q := queueName(t)
		task := func(payload string) rdq.Task {
			return rdq.Task{Queue: q, HandlerRef: "bill", Payload: []byte(payload), ContentType: "application/json",
				Unique: &rdq.Unique{KeyFrom: []string{"/customer_id", "/period"}, Hold: rdq.HoldUntilSucceeded}}
		}
		first := submit(t, c, task(`{"customer_id": 42, "period": {"year": 2026, "month": 12}, "note": "a"}`))
		// The key is "sha256:" and the hex SHA-256 of the canonical JSON
		// array of the values (docs/uniqueness.md).
		sum := sha256.Sum256([]byte(`[42,{"month":12,"year":2026}]`))
		if got, want := first.Headers["rdq.unique_key"], "sha256:"+hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("derived key %q, want %q", got, want)
		}
		_, err := c.Submit(ctx, task(`{"note":"b","period":{"month":12,"year":2026},"customer_id":42}`))
		if e := uniqueHeld(t, err, first.ID); e.Hold != string(rdq.HoldUntilSucceeded) {
			t.Fatalf("UNIQUE_HELD says hold %q, want until_succeeded", e.Hold)
		}
		if _, err := c.Submit(ctx, task(`{"customer_id": 43, "period": {"year": 2026, "month": 12}}`)); err != nil {
			t.Fatalf("another customer: %v", err)
		}
	})
}

func TestReplaceGivesAWaitingHolderTheNewPayload(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		ctx := context.Background()
		q := queueName(t)
		holder := submit(t, c, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte(`{"v":1}`), ContentType: "application/json",
			Headers: map[string]string{"rev": "1"}, Delay: time.Hour, Unique: &rdq.Unique{Key: "account-9"}})

		replaced, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("v2"), ContentType: "text/plain",
			Headers: map[string]string{"rev": "2"}, Unique: &rdq.Unique{Key: "account-9", OnConflict: rdq.OnConflictReplace}})
		if err != nil {
			t.Fatal(err)
		}
		if !replaced.Existing || replaced.Envelope.ID != holder.ID {
			t.Fatalf("replace answered existing=%v id=%s, want the holder %s", replaced.Existing, replaced.Envelope.ID, holder.ID)
		}
		env, err := c.Get(ctx, holder.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(env.Payload) != "v2" || env.PayloadContentType != "text/plain" || env.Headers["rev"] != "2" ||
			string(replaced.Envelope.Payload) != "v2" {
			b, _ := env.Encode()
			t.Fatalf("the holder did not take the new payload: %s", b)
		}
		if env.NextAttemptAt == nil || holder.NextAttemptAt == nil || !env.NextAttemptAt.Equal(*holder.NextAttemptAt) {
			t.Fatalf("replace moved the due time: %v, was %v", env.NextAttemptAt, holder.NextAttemptAt)
		}
		if n := len(pendingTasks(t, c, q)); n != 1 {
			t.Fatalf("%d tasks pending, want the holder alone", n)
		}

		// Debounce replaces too, and makes the holder due when this submit would be.
		before := time.Now()
		debounced, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("v3"), Delay: 2 * time.Hour,
			Unique: &rdq.Unique{Key: "account-9", OnConflict: rdq.OnConflictDebounce}})
		if err != nil {
			t.Fatal(err)
		}
		due := debounced.Envelope.NextAttemptAt
		if !debounced.Existing || debounced.Envelope.ID != holder.ID || string(debounced.Envelope.Payload) != "v3" ||
			due == nil || due.Before(before.Add(2*time.Hour-time.Second)) || due.After(time.Now().Add(2*time.Hour+time.Second)) {
			t.Fatalf("debounce answered existing=%v id=%s payload %q due %v", debounced.Existing, debounced.Envelope.ID, debounced.Envelope.Payload, due)
		}

		// A holder in flight is never replaced.
		running := submit(t, c, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("r1"), Unique: &rdq.Unique{Key: "account-10"}})
		claimed, err := c.Claim(ctx, q, 1, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].Envelope.ID != running.ID {
			t.Fatalf("claiming the holder: %v %v", claimed, err)
		}
		_, err = c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("r2"),
			Unique: &rdq.Unique{Key: "account-10", OnConflict: rdq.OnConflictReplace}})
		uniqueHeld(t, err, running.ID)
		if env, err := c.Get(ctx, running.ID); err != nil || string(env.Payload) != "r1" {
			t.Fatalf("the running holder's payload: %q %v", env.Payload, err)
		}
	})
}

func TestABatchWithTwoTasksOfOneKeyWritesOne(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		q := queueName(t)
		task := func(key, payload string) rdq.Task {
			return rdq.Task{Queue: q, HandlerRef: "h", Payload: []byte(payload), Unique: &rdq.Unique{Key: key}}
		}
		results := c.SubmitBatch(context.Background(), []rdq.Task{task("k", "1"), task("k", "2"), task("other", "3")})
		if len(results) != 3 {
			t.Fatalf("%d results for 3 tasks", len(results))
		}
		if results[2].Err != nil || string(results[2].Envelope.Payload) != "3" {
			t.Fatalf("the task of another key: %v", results[2].Err)
		}
		// SubmitBatch's submits run concurrently: either may hold the key.
		won, lost := results[0], results[1]
		if won.Err != nil {
			won, lost = lost, won
		}
		if won.Err != nil {
			t.Fatalf("neither task of the key was written: %v; %v", results[0].Err, results[1].Err)
		}
		uniqueHeld(t, lost.Err, won.Envelope.ID)
		if n := len(pendingTasks(t, c, q)); n != 2 {
			t.Fatalf("%d tasks pending, want 2", n)
		}
	})
}

func TestBadUniqueInputIsRefusedNamingTheField(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		ctx := context.Background()
		q := queueName(t)
		bad := []struct {
			field  string
			unique rdq.Unique
		}{
			{"unique.key", rdq.Unique{Key: "k", KeyFrom: []string{"/id"}}}, // both
			{"unique.key", rdq.Unique{}},                                   // neither
			{"unique.key_from", rdq.Unique{KeyFrom: []string{"/missing"}}},
			{"unique.key_from", rdq.Unique{KeyFrom: []string{"id"}}},
			{"unique.hold", rdq.Unique{Key: "k", Hold: "later"}},
			{"unique.scope", rdq.Unique{Key: "k", Scope: "cluster"}},
			{"unique.on_conflict", rdq.Unique{Key: "k", OnConflict: "merge"}},
			{"unique.hold_ms", rdq.Unique{Key: "k", Hold: rdq.HoldFor}},
			{"unique.hold_ms", rdq.Unique{Key: "k", Duration: time.Minute}},
		}
		for _, b := range bad {
			u := b.unique
			_, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "h", Payload: []byte(`{"id":1}`), ContentType: "application/json", Unique: &u})
			var e *rdq.Error
			// hold `for` without hold_ms is INVALID_FIELD on today's server
			// (docs/uniqueness.md says INVALID_ARGUMENT): either is bad input.
			if !errors.As(err, &e) || (e.Code != rdq.CodeInvalidArgument && e.Code != rdq.CodeInvalidField) ||
				e.Field != b.field || e.Status != http.StatusBadRequest {
				t.Errorf("%+v: got %v, want INVALID_ARGUMENT naming %s", b.unique, err, b.field)
			}
		}
		if n := len(pendingTasks(t, c, q)); n != 0 {
			t.Fatalf("bad input wrote %d tasks", n)
		}
	})
}

// A negative hold duration has no wire form: refused before any request.
func TestANegativeHoldIsRefusedBeforeAnyRequest(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	for _, tr := range submitTransports {
		c := newClientWith(t, rdq.ClientConfig{URL: srv.URL, SubmitTransport: tr})
		task := rdq.Task{Queue: "q", HandlerRef: "h", Unique: &rdq.Unique{Key: "k", Hold: rdq.HoldFor, Duration: -time.Second}}
		_, err := c.Submit(context.Background(), task)
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeInvalidArgument || e.Field != "unique.hold_ms" || e.Status != 0 {
			t.Fatalf("%v: got %v, want a local INVALID_ARGUMENT naming unique.hold_ms", tr, err)
		}
		if r := c.SubmitBatch(context.Background(), []rdq.Task{task}); rdq.ErrorCode(r[0].Err) != rdq.CodeInvalidArgument {
			t.Fatalf("%v: batch: %v", tr, r[0].Err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	if _, err := rdq.NewClient(rdq.ClientConfig{URL: srv.URL, SubmitTransport: 9}); err == nil || !strings.Contains(err.Error(), "SubmitTransport") {
		t.Fatalf("an unknown submit transport: %v", err)
	}
}

func TestExistingAnswersTheHolderAndForeverIsTheIdempotencyKey(t *testing.T) {
	forEachUniqueStore(t, func(t *testing.T, c *rdq.Client) {
		ctx := context.Background()
		q := queueName(t)
		holder := submit(t, c, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("v1"),
			Unique: &rdq.Unique{Key: "doc-1", OnConflict: rdq.OnConflictExisting}})
		met, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("v2"),
			Unique: &rdq.Unique{Key: "doc-1", OnConflict: rdq.OnConflictExisting}})
		if err != nil {
			t.Fatal(err)
		}
		if !met.Existing || met.Envelope.ID != holder.ID || string(met.Envelope.Payload) != "v1" {
			t.Fatalf("existing answered existing=%v id=%s payload %q, want the holder %s unchanged",
				met.Existing, met.Envelope.ID, met.Envelope.Payload, holder.ID)
		}
		// Hold forever in the queue's scope with existing is the idempotency key.
		keyed, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("k1"), IdempotencyKey: "order-1"})
		if err != nil {
			t.Fatal(err)
		}
		same, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "sync", Payload: []byte("k2"),
			Unique: &rdq.Unique{Key: "order-1", Hold: rdq.HoldForever, OnConflict: rdq.OnConflictExisting}})
		if err != nil {
			t.Fatal(err)
		}
		if !same.Existing || same.Envelope.ID != keyed.Envelope.ID {
			t.Fatalf("unique forever/existing after an idempotency key: existing=%v id=%s, want %s",
				same.Existing, same.Envelope.ID, keyed.Envelope.ID)
		}
	})
}
