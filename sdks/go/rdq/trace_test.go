package rdq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// newTraceParent is a fresh, well-formed, sampled W3C traceparent.
func newTraceParent(t testing.TB) string {
	var trace [16]byte
	var span [8]byte
	if _, err := rand.Read(trace[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(span[:]); err != nil {
		t.Fatal(err)
	}
	trace[0] |= 1 // never all zeros
	span[0] |= 1
	return "00-" + hex.EncodeToString(trace[:]) + "-" + hex.EncodeToString(span[:]) + "-01"
}

func TestTheContextCarriesATraceParent(t *testing.T) {
	ctx := context.Background()
	if tp, ok := rdq.TraceParentFromContext(ctx); ok || tp != "" {
		t.Fatalf("a bare context has a traceparent: %q", tp)
	}
	want := newTraceParent(t)
	ctx = rdq.ContextWithTraceParent(ctx, want)
	if tp, ok := rdq.TraceParentFromContext(ctx); !ok || tp != want {
		t.Fatalf("got %q %v, want %q", tp, ok, want)
	}
	if tp, ok := rdq.TraceParentFromContext(rdq.ContextWithTraceParent(ctx, "")); ok || tp != "" {
		t.Fatalf("an empty traceparent did not hide the earlier one: %q", tp)
	}
}

// A local server that records the traceparent request header of each submit.
type headerRecorder struct {
	mu   sync.Mutex
	seen []string // one per request; "<none>" when the header was absent
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v := "<none>"
	if vs, ok := r.Header["Traceparent"]; ok && len(vs) > 0 {
		v = vs[0]
	}
	h.mu.Lock()
	h.seen = append(h.seen, v)
	h.mu.Unlock()
	w.WriteHeader(http.StatusServiceUnavailable)
}

func (h *headerRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen
	h.seen = nil
	return s
}

func TestOnlyWellFormedTraceParentsAreSent(t *testing.T) {
	rec := &headerRecorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	const (
		trace = "4bf92f3577b34da6a3ce929d0e0e4736"
		span  = "00f067aa0ba902b7"
	)
	cases := []struct {
		value string
		sent  string // "" when nothing may be sent
	}{
		{"00-" + trace + "-" + span + "-01", "00-" + trace + "-" + span + "-01"},
		{"00-" + trace + "-" + span + "-00", "00-" + trace + "-" + span + "-00"},
		{" 00-" + trace + "-" + span + "-01\t", "00-" + trace + "-" + span + "-01"},
		{"01-" + trace + "-" + span + "-01-future", "01-" + trace + "-" + span + "-01-future"},
		{"01-" + trace + "-" + span + "-01", "01-" + trace + "-" + span + "-01"},
		{"", ""},
		{"garbage", ""},
		{"00-" + trace + "-" + span + "-01-extra", ""},              // version 00 has four fields
		{"ff-" + trace + "-" + span + "-01", ""},                    // version ff is invalid
		{"00-" + trace[:31] + "-" + span + "-01", ""},               // short trace id
		{"00-" + trace + "-" + span + "-1", ""},                     // short flags
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + span + "-01", ""}, // upper-case hex
		{"00-" + trace[:31] + "g-" + span + "-01", ""},              // not hex
		{"00-00000000000000000000000000000000-" + span + "-01", ""},
		{"00-" + trace + "-0000000000000000-01", ""},
		{"00_" + trace + "_" + span + "_01", ""},
		{"01-" + trace + "-" + span + "-01x", ""},     // a later version's fields start with "-"
		{"01-" + trace + "-" + span + "-01-a\nb", ""}, // not a valid header value
	}
	for _, tc := range cases {
		value := tc.value
		hooked, err := rdq.NewClient(rdq.ClientConfig{URL: srv.URL, TraceParent: func(context.Context) string { return value }})
		if err != nil {
			t.Fatal(err)
		}
		plain := newClient(t, srv.URL)
		ctx := rdq.ContextWithTraceParent(context.Background(), value)
		task := rdq.Task{Queue: "q", HandlerRef: "h"}
		_, _ = hooked.Submit(context.Background(), task) // from the hook
		_, _ = plain.Submit(ctx, task)                   // from the context
		_ = hooked.SubmitBatch(context.Background(), []rdq.Task{task})
		_ = plain.SubmitBatch(ctx, []rdq.Task{task})
		want := tc.sent
		if want == "" {
			want = "<none>"
		}
		seen := rec.take()
		if len(seen) != 4 {
			t.Fatalf("%q: %d requests, want 4", value, len(seen))
		}
		for i, got := range seen {
			if got != want {
				t.Errorf("%q: request %d sent traceparent %q, want %q", value, i, got, want)
			}
		}
	}
}

func TestTheHookWinsOverTheContextAndFallsBackToIt(t *testing.T) {
	rec := &headerRecorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	fromHook, fromCtx := newTraceParent(t), newTraceParent(t)
	var hookAnswer string
	var calls int
	c, err := rdq.NewClient(rdq.ClientConfig{URL: srv.URL, TraceParent: func(ctx context.Context) string {
		calls++
		return hookAnswer
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := rdq.ContextWithTraceParent(context.Background(), fromCtx)
	task := rdq.Task{Queue: "q", HandlerRef: "h"}

	hookAnswer = fromHook
	_, _ = c.Submit(ctx, task)
	_ = c.SubmitBatch(ctx, []rdq.Task{task, task, task})
	hookAnswer = "not a traceparent"
	_, _ = c.Submit(ctx, task)
	hookAnswer = ""
	_, _ = c.Submit(ctx, task)
	_, _ = c.Submit(context.Background(), task)
	withOwn := rdq.Task{Queue: "q", HandlerRef: "h", Headers: map[string]string{"traceparent": "explicit"}}
	_, _ = c.Submit(ctx, withOwn)

	want := []string{fromHook, fromHook, fromHook, fromHook, fromCtx, fromCtx, "<none>", "<none>"}
	seen := rec.take()
	if len(seen) != len(want) {
		t.Fatalf("%d requests, want %d: %q", len(seen), len(want), seen)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d sent %q, want %q", i, seen[i], want[i])
		}
	}
	if calls != 6 {
		t.Errorf("the hook was called %d times, want 6 (once per Submit, once per SubmitBatch)", calls)
	}
}

func TestSubmitsJoinTheCallersTrace(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		q := queueName(t)
		stored := func(t *testing.T, id string) (string, bool) {
			t.Helper()
			env, err := c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			tp, ok := env.Headers["traceparent"]
			return tp, ok
		}

		t.Run("from the context", func(t *testing.T) {
			tp := newTraceParent(t)
			s, err := c.Submit(rdq.ContextWithTraceParent(context.Background(), tp), rdq.Task{Queue: q, HandlerRef: "h", Headers: map[string]string{"tenant": "acme"}})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := stored(t, s.Envelope.ID); got != tp || s.Envelope.Headers["traceparent"] != tp {
				t.Fatalf("stored traceparent %q (answer %q), want %q", got, s.Envelope.Headers["traceparent"], tp)
			}
			env, _ := c.Get(context.Background(), s.Envelope.ID)
			if env.Headers["tenant"] != "acme" {
				t.Fatalf("the task's own headers were lost: %v", env.Headers)
			}
		})

		t.Run("an explicit header wins", func(t *testing.T) {
			mine, ambient := newTraceParent(t), newTraceParent(t)
			hooked, err := rdq.NewClient(rdq.ClientConfig{URL: url, TraceParent: func(context.Context) string { return ambient }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := rdq.ContextWithTraceParent(context.Background(), ambient)
			for _, client := range []*rdq.Client{c, hooked} {
				s, err := client.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "h", Headers: map[string]string{"traceparent": mine}})
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := stored(t, s.Envelope.ID); got != mine {
					t.Fatalf("stored traceparent %q, want the task's own %q", got, mine)
				}
			}
		})

		t.Run("a malformed one is not sent", func(t *testing.T) {
			bad := "00-" + newTraceParent(t)[3:35] + "-0000000000000000-01" // all-zero span id
			hooked, err := rdq.NewClient(rdq.ClientConfig{URL: url, TraceParent: func(context.Context) string { return bad }})
			if err != nil {
				t.Fatal(err)
			}
			for _, submit := range []func() (rdq.Submitted, error){
				func() (rdq.Submitted, error) {
					return hooked.Submit(context.Background(), rdq.Task{Queue: q, HandlerRef: "h"})
				},
				func() (rdq.Submitted, error) {
					return c.Submit(rdq.ContextWithTraceParent(context.Background(), "00-abc-01"), rdq.Task{Queue: q, HandlerRef: "h"})
				},
			} {
				s, err := submit()
				if err != nil {
					t.Fatal(err)
				}
				if got, ok := stored(t, s.Envelope.ID); ok {
					t.Fatalf("a malformed traceparent reached the task: %q", got)
				}
			}
		})

		t.Run("a batch", func(t *testing.T) {
			tp, mine := newTraceParent(t), newTraceParent(t)
			tasks := make([]rdq.Task, 5)
			for i := range tasks {
				tasks[i] = rdq.Task{Queue: q, HandlerRef: "h"}
			}
			tasks[3].Headers = map[string]string{"traceparent": mine}
			results := c.SubmitBatch(rdq.ContextWithTraceParent(context.Background(), tp), tasks)
			for i, r := range results {
				if r.Err != nil {
					t.Fatalf("task %d: %v", i, r.Err)
				}
				want := tp
				if i == 3 {
					want = mine
				}
				if got, _ := stored(t, r.Envelope.ID); got != want {
					t.Fatalf("task %d: stored traceparent %q, want %q", i, got, want)
				}
			}
		})
	})
}

func TestAHandlerContinuesItsTasksTrace(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q, next := queueName(t), queueName(t)
		type seen struct {
			task       string
			tp         string
			ok         bool
			followUpID string
			err        error
		}
		results := make(chan seen, 4)
		reg := rdq.NewRegistry()
		reg.Register("traced", func(ctx context.Context, task envelope.Envelope) error {
			tp, ok := rdq.TraceParentFromContext(ctx)
			s, err := c.Submit(ctx, rdq.Task{Queue: next, HandlerRef: "follow-up"})
			results <- seen{task: task.ID, tp: tp, ok: ok, followUpID: s.Envelope.ID, err: err}
			return err
		})
		// The worker's own context carries a trace of its own, which a task
		// without a trace context must not join.
		workerTrace := newTraceParent(t)
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(rdq.ContextWithTraceParent(context.Background(), workerTrace))
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})

		taskTrace := newTraceParent(t)
		traced := submit(t, c, rdq.Task{Queue: q, HandlerRef: "traced", Headers: map[string]string{"traceparent": taskTrace}})
		untraced := submit(t, c, rdq.Task{Queue: q, HandlerRef: "traced"})
		malformed := submit(t, c, rdq.Task{Queue: q, HandlerRef: "traced", Headers: map[string]string{"traceparent": "00-zz-01"}})
		want := map[string]string{traced.ID: taskTrace, untraced.ID: "", malformed.ID: ""}

		for range want {
			var s seen
			select {
			case s = <-results:
			case <-time.After(60 * time.Second):
				t.Fatal("the handler did not run for every task")
			}
			if s.err != nil {
				t.Fatalf("the follow-up submit of %s: %v", s.task, s.err)
			}
			wantTP, known := want[s.task]
			if !known {
				t.Fatalf("the handler ran for an unknown task %s", s.task)
			}
			if s.tp != wantTP || s.ok != (wantTP != "") {
				t.Fatalf("task %s: the handler's context has traceparent %q %v, want %q", s.task, s.tp, s.ok, wantTP)
			}
			followUp, err := c.Get(context.Background(), s.followUpID)
			if err != nil {
				t.Fatal(err)
			}
			got, has := followUp.Headers["traceparent"]
			if wantTP == "" && has || wantTP != "" && got != wantTP {
				t.Fatalf("task %s: the follow-up task has traceparent %q (present %v), want %q", s.task, got, has, wantTP)
			}
			waitFor(t, c, s.task, "SUCCEEDED", func(env envelope.Envelope) bool { return env.Status == envelope.StatusSucceeded })
		}
	})
}
