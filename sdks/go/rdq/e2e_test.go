package rdq_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

func TestSubmitThenGetReturnsTheTaskAsSubmitted(t *testing.T) {
	forEachStore(t, func(t *testing.T, _ *rdq.Client, url string) {
		for _, tr := range submitTransports {
			t.Run(tr.String(), func(t *testing.T) {
				c := newClientWith(t, rdq.ClientConfig{URL: url, SubmitTransport: tr})
				q := queueName(t)
				traceparent := newTraceParent(t)
				ctx := rdq.ContextWithTraceParent(context.Background(), traceparent)
				s, err := c.Submit(ctx, rdq.Task{
					Queue: q, HandlerRef: "send-email", Payload: []byte(`{"to":"a@b.c"}`), ContentType: "application/json",
					Headers: map[string]string{"tenant": "acme"}, HandlerVersion: "v3", Priority: 5,
					Delay: time.Hour, IdempotencyKey: "order-42", CorrelationID: "corr-1", FlowKey: "tenant-7",
				})
				if err != nil {
					t.Fatal(err)
				}
				if s.Existing {
					t.Fatal("a first submit reported an existing task")
				}
				env, err := c.Get(ctx, s.Envelope.ID)
				if err != nil {
					t.Fatal(err)
				}
				if string(env.Payload) != `{"to":"a@b.c"}` || env.PayloadContentType != "application/json" ||
					env.Headers["tenant"] != "acme" || env.HandlerVersion == nil || *env.HandlerVersion != "v3" ||
					env.Priority != 5 || env.Status != envelope.StatusPending || env.CorrelationID() != "corr-1" ||
					env.FlowKey() != "tenant-7" || env.Headers[rdq.TraceParentHeader] != traceparent {
					b, _ := env.Encode()
					t.Fatalf("the stored task differs from the submit: %s", b)
				}
				if env.NextAttemptAt == nil || env.NextAttemptAt.Sub(env.CreatedAt) < time.Hour {
					t.Fatalf("the delay was not applied: created %v, due %v", env.CreatedAt, env.NextAttemptAt)
				}
				again, err := c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "send-email", IdempotencyKey: "order-42"})
				if err != nil {
					t.Fatal(err)
				}
				if !again.Existing || again.Envelope.ID != env.ID {
					t.Fatalf("the idempotency key did not answer the first task: existing=%v id=%s", again.Existing, again.Envelope.ID)
				}
				bare, err := c.Submit(context.Background(), rdq.Task{Queue: q, HandlerRef: "h"})
				if err != nil {
					t.Fatal(err)
				}
				if bare.Envelope.PayloadContentType != "application/octet-stream" || len(bare.Envelope.Payload) != 0 ||
					bare.Envelope.HandlerVersion != nil || bare.Envelope.Headers[rdq.TraceParentHeader] != "" {
					b, _ := bare.Envelope.Encode()
					t.Fatalf("a bare submit: %s", b)
				}
				_, err = c.Submit(ctx, rdq.Task{Queue: "Bad Queue", HandlerRef: "h"})
				if rdq.ErrorCode(err) != rdq.CodeInvalidQueueName {
					t.Fatalf("a bad queue name: %v", err)
				}
				cancelled, cancel := context.WithCancel(ctx)
				cancel()
				if _, err := c.Submit(cancelled, rdq.Task{Queue: q, HandlerRef: "h"}); !errors.Is(err, context.Canceled) {
					t.Fatalf("a cancelled context: %v", err)
				}
			})
		}
	})
}

func TestReservedHeadersAreRefusedBeforeAnyRequest(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	for _, key := range []string{"rdq.source", "RDQ.x", "Rdq.submitted_by"} {
		_, err := c.Submit(context.Background(), rdq.Task{Queue: "q", HandlerRef: "h", Headers: map[string]string{"ok": "1", key: "v"}})
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeReservedHeader || e.Field != "headers."+key || e.Status != 0 {
			t.Fatalf("header %q: got %v, want a local RESERVED_HEADER", key, err)
		}
		var ee *envelope.Error
		if !errors.As(err, &ee) || ee.Code != envelope.CodeReservedHeader {
			t.Fatalf("header %q: the envelope error is not wrapped: %v", key, err)
		}
	}
	for _, key := range []string{"has space", "é", strings.Repeat("k", 129)} {
		_, err := c.Submit(context.Background(), rdq.Task{Queue: "q", HandlerRef: "h", FlowKey: key})
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeInvalidField || e.Field != "flow_key" || e.Status != 0 {
			t.Fatalf("flow key %q: got %v, want a local INVALID_FIELD naming flow_key", key, err)
		}
	}
	results := c.SubmitBatch(context.Background(), []rdq.Task{{Queue: "q", HandlerRef: "h", Headers: map[string]string{"rdq.x": "1"}}})
	if rdq.ErrorCode(results[0].Err) != rdq.CodeReservedHeader {
		t.Fatalf("batch: %v", results[0].Err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
}

func TestBadInputIsRefusedWithTheServersStableCode(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		_, err := c.Get(ctx, "01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeTaskNotFound || e.Status != 404 {
			t.Fatalf("unknown task: %v", err)
		}
		if _, err := c.Get(ctx, "not-an-id"); rdq.ErrorCode(err) != rdq.CodeInvalidArgument {
			t.Fatalf("malformed id: %v", err)
		}
		if _, err := c.Submit(ctx, rdq.Task{Queue: "Bad Queue", HandlerRef: "h"}); rdq.ErrorCode(err) != rdq.CodeInvalidQueueName {
			t.Fatalf("bad queue: %v", err)
		}
		if _, err := c.SetQueueConfig(ctx, q, map[string]any{"max_attempts": 0}); rdq.ErrorCode(err) != rdq.CodeInvalidPolicy {
			t.Fatalf("bad policy: %v", err)
		}
		configure(t, c, q, map[string]any{"max_envelope_bytes": 600})
		_, err = c.Submit(ctx, rdq.Task{Queue: q, HandlerRef: "h", Payload: make([]byte, 2000)})
		if !errors.As(err, &e) || e.Code != rdq.CodePayloadTooLarge || e.Status != 413 {
			t.Fatalf("oversized payload: %v", err)
		}
		if _, err := c.DLQList(ctx, "no-such-queue-"+randomSuffix(), rdq.DLQListOptions{}); rdq.ErrorCode(err) != rdq.CodeQueueNotFound {
			t.Fatalf("unknown queue: %v", err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := c.Get(cancelled, "01J2ZK7Q8XW5H3N9G4T6B8RDQ0"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled context: %v", err)
		}
	})
}

func TestSubmitBatchAnswersOneResultPerTaskInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		q := queueName(t)
		tasks := make([]rdq.Task, 20)
		for i := range tasks {
			tasks[i] = rdq.Task{Queue: q, HandlerRef: "h", Payload: []byte(fmt.Sprint(i))}
		}
		tasks[7].Headers = map[string]string{"rdq.forged": "x"}
		results := c.SubmitBatch(context.Background(), tasks)
		for i, r := range results {
			if i == 7 {
				if rdq.ErrorCode(r.Err) != rdq.CodeReservedHeader {
					t.Fatalf("task 7: %v", r.Err)
				}
				continue
			}
			if r.Err != nil || string(r.Envelope.Payload) != fmt.Sprint(i) {
				t.Fatalf("task %d: %v %q", i, r.Err, r.Envelope.Payload)
			}
		}
	})
}

// The ladder, rung by rung, against the server's retry machinery.

var errSentinel = errors.New("sentinel")

type cardError struct{ code string }

func (e *cardError) Error() string { return "card declined: " + e.code }

type tempError struct{}

func (tempError) Error() string { return "temporarily unavailable" }

type response struct{ Status string }

func lastAttempt(env envelope.Envelope) envelope.Attempt {
	if len(env.Attempts) == 0 {
		return envelope.Attempt{}
	}
	return env.Attempts[len(env.Attempts)-1]
}

func TestTheOutcomeLadderDecidesEveryRung(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{
			"max_attempts":         3,
			"backoff":              map[string]any{"kind": "none"},
			"non_retryable_errors": []string{"*json.SyntaxError", "billing.*", "both.*", "*rdq_test.namedError", "rdq_test.tempError"},
			"retryable_errors":     []string{"both.*", "*rdq_test.named*"},
		})
		var deadMu sync.Mutex
		dead := map[string]bool{}
		var attempts sync.Map // id -> *atomic.Int32
		count := func(id string) int32 {
			v, _ := attempts.LoadOrStore(id, new(atomic.Int32))
			return v.(*atomic.Int32).Add(1)
		}
		reg := rdq.NewRegistry()
		reg.Register("succeed", func(ctx context.Context, task envelope.Envelope) error { return nil })
		reg.Register("fail-default", func(ctx context.Context, task envelope.Envelope) error { return errors.New("boom") })
		reg.Register("fail-wrapped-permanent", func(ctx context.Context, task envelope.Envelope) error {
			return rdq.Permanent(fmt.Errorf("charging: %w", &cardError{"insufficient_funds"}))
		})
		reg.Register("fail-retryable-over-glob", func(ctx context.Context, task envelope.Envelope) error {
			if count(task.ID) == 1 {
				var v any
				return rdq.Retryable(json.Unmarshal([]byte("{"), &v))
			}
			return nil
		})
		reg.Register("fail-named", func(ctx context.Context, task envelope.Envelope) error {
			return rdq.PermanentAs("billing.Declined", errors.New("declined"))
		})
		reg.Register("fail-sentinel", func(ctx context.Context, task envelope.Envelope) error {
			return fmt.Errorf("lookup: %w", errSentinel)
		})
		reg.Register("retryable-over-classifier", func(ctx context.Context, task envelope.Envelope) error {
			if count(task.ID) == 1 {
				return rdq.Retryable(fmt.Errorf("lookup: %w", errSentinel))
			}
			return nil
		})
		reg.Register("fail-temp-type-over-glob", func(ctx context.Context, task envelope.Envelope) error {
			if count(task.ID) == 1 {
				return tempError{}
			}
			return nil
		})
		reg.Register("fail-glob", func(ctx context.Context, task envelope.Envelope) error {
			var v any
			return fmt.Errorf("decoding: %w", json.Unmarshal([]byte("{"), &v))
		})
		reg.Register("fail-both-globs", func(ctx context.Context, task envelope.Envelope) error {
			return rdq.RetryableAs("both.Listed", errors.New("listed twice")) // forced: the wrapper wins
		})
		reg.Register("fail-both-globs-unforced", func(ctx context.Context, task envelope.Envelope) error {
			return &namedError{"both.Listed"}
		})
		reg.Register("panic", func(ctx context.Context, task envelope.Envelope) error {
			if count(task.ID) == 1 {
				panic("handler blew up")
			}
			return nil
		})
		reg.Register("defer", func(ctx context.Context, task envelope.Envelope) error {
			if count(task.ID) == 1 {
				return rdq.Defer(10 * time.Millisecond)
			}
			return nil
		})
		reg.Register("long-message", func(ctx context.Context, task envelope.Envelope) error {
			return rdq.Permanent(errors.New(strings.Repeat("é", 5000)))
		})
		reg.Register("mapper-overrides-error", func(ctx context.Context, task envelope.Envelope) error {
			return errors.New("already processed")
		}, rdq.WithOutcomeMapper(func(ret any, err error) rdq.Outcome {
			if err != nil && err.Error() == "already processed" {
				return rdq.Success()
			}
			return rdq.RetryableFailure(err)
		}))
		reg.RegisterResult("mapper-result", func(ctx context.Context, task envelope.Envelope) (any, error) {
			return &response{Status: string(task.Payload)}, nil
		}, func(ret any, err error) rdq.Outcome {
			if err != nil {
				return rdq.RetryableFailure(err)
			}
			switch ret.(*response).Status {
			case "OK":
				return rdq.Success()
			default:
				return rdq.PermanentFailure(fmt.Errorf("rejected: %s", ret.(*response).Status)).
					WithType("billing.Rejected").WithDetail(json.RawMessage(`{"status":"` + ret.(*response).Status + `"}`))
			}
		})
		type typedArgs struct {
			N int `json:"n"`
		}
		reg.Register("typed", rdq.JSONHandler(func(ctx context.Context, a typedArgs, task envelope.Envelope) error {
			if a.N != 1 {
				return fmt.Errorf("decoded %d", a.N)
			}
			return nil
		}))
		reg.Register("timeout", func(ctx context.Context, task envelope.Envelope) error {
			<-ctx.Done()
			var cause *rdq.TimeoutError
			if !errors.As(context.Cause(ctx), &cause) {
				return rdq.Permanent(fmt.Errorf("cancelled by %v", context.Cause(ctx)))
			}
			return ctx.Err()
		}, rdq.WithTimeout(20*time.Millisecond))
		runWorker(t, c, rdq.WorkerConfig{
			Transport: tr, Queues: []string{q}, Registry: reg, Concurrency: 8, PollInterval: 20 * time.Millisecond,
			Classifiers: []rdq.Classifier{
				rdq.PermanentIs(errSentinel).Named("app.Sentinel"),
				rdq.RetryableType[tempError](),
			},
			OnDeadLetter: func(ctx context.Context, task envelope.Envelope) {
				deadMu.Lock()
				dead[task.ID] = true
				deadMu.Unlock()
			},
		})

		cases := []struct {
			handler, payload string
			status           envelope.Status
			attempts         int
			outcome          envelope.Outcome // of the last attempt
			errorType        string           // of the last attempt, "" for none
		}{
			{"succeed", "", envelope.StatusSucceeded, 1, envelope.OutcomeSuccess, ""},
			{"fail-default", "", envelope.StatusDead, 3, envelope.OutcomeRetryableFailure, "*errors.errorString"},
			{"fail-wrapped-permanent", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "*rdq_test.cardError"},
			{"fail-retryable-over-glob", "", envelope.StatusSucceeded, 2, envelope.OutcomeSuccess, ""},
			{"fail-named", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "billing.Declined"},
			{"fail-sentinel", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "app.Sentinel"},
			{"retryable-over-classifier", "", envelope.StatusSucceeded, 2, envelope.OutcomeSuccess, ""},
			{"fail-temp-type-over-glob", "", envelope.StatusSucceeded, 2, envelope.OutcomeSuccess, ""},
			{"fail-glob", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "*json.SyntaxError"},
			{"fail-both-globs", "", envelope.StatusDead, 3, envelope.OutcomeRetryableFailure, "both.Listed"},
			{"fail-both-globs-unforced", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "*rdq_test.namedError"},
			{"panic", "", envelope.StatusSucceeded, 2, envelope.OutcomeSuccess, ""},
			{"defer", "", envelope.StatusSucceeded, 1, envelope.OutcomeSuccess, ""},
			{"long-message", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "*errors.errorString"},
			{"mapper-overrides-error", "", envelope.StatusSucceeded, 1, envelope.OutcomeSuccess, ""},
			{"mapper-result", "OK", envelope.StatusSucceeded, 1, envelope.OutcomeSuccess, ""},
			{"mapper-result", "REJECTED", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, "billing.Rejected"},
			{"no-such-handler", "", envelope.StatusDead, 1, envelope.OutcomePermanentFailure, rdq.NoHandlerErrorType},
			{"typed", `{"n":1}`, envelope.StatusSucceeded, 1, envelope.OutcomeSuccess, ""},
			{"typed", `{"n":`, envelope.StatusDead, 1, envelope.OutcomePermanentFailure, rdq.UndecodablePayloadErrorType},
			{"timeout", "", envelope.StatusDead, 3, envelope.OutcomeRetryableFailure, "*rdq.TimeoutError"},
		}
		ids := make([]string, len(cases))
		for i, tc := range cases {
			ids[i] = submit(t, c, rdq.Task{Queue: q, HandlerRef: tc.handler, Payload: []byte(tc.payload)}).ID
		}
		for i, tc := range cases {
			env := waitFor(t, c, ids[i], "terminal", terminal)
			last := lastAttempt(env)
			gotType := ""
			if last.Error != nil {
				gotType = last.Error.Type
			}
			if env.Status != tc.status || len(env.Attempts) != tc.attempts || last.Outcome != tc.outcome || gotType != tc.errorType {
				b, _ := env.Encode()
				t.Errorf("%s(%s): got %s after %d attempts, last %s %q; want %s after %d, last %s %q\n%s",
					tc.handler, tc.payload, env.Status, len(env.Attempts), last.Outcome, gotType,
					tc.status, tc.attempts, tc.outcome, tc.errorType, b)
			}
			deadMu.Lock()
			hooked := dead[env.ID]
			deadMu.Unlock()
			if env.Status == envelope.StatusDead && !hooked {
				// The hook runs after the settle's answer, which Get can beat.
				time.Sleep(200 * time.Millisecond)
				deadMu.Lock()
				hooked = dead[env.ID]
				deadMu.Unlock()
			}
			if (env.Status == envelope.StatusDead) != hooked {
				t.Errorf("%s: status %s but dead-letter hook called=%v", tc.handler, env.Status, hooked)
			}
			switch tc.handler {
			case "panic":
				first := env.Attempts[0]
				if first.Outcome != envelope.OutcomeRetryableFailure || first.Error == nil || first.Error.Type != rdq.PanicErrorType ||
					first.Error.Stack == nil || !strings.Contains(*first.Error.Stack, "panic") || !strings.Contains(first.Error.Message, "handler blew up") {
					t.Errorf("panic attempt: %+v", first.Error)
				}
			case "defer":
				if env.DeferralCount != 1 || env.AttemptCount != 1 {
					t.Errorf("defer: deferral_count %d attempt_count %d; want 1 and 1", env.DeferralCount, env.AttemptCount)
				}
			case "long-message":
				msg := last.Error.Message
				if len(msg) > envelope.MaxMessageBytes || !strings.HasSuffix(msg, envelope.TruncationMarker) || msg != envelope.TruncateMessage(strings.Repeat("é", 5000)) {
					t.Errorf("long message: %d bytes, suffix %q", len(msg), msg[len(msg)-20:])
				}
			case "timeout":
				if !strings.HasPrefix(last.Error.Message, "the handler did not finish within its timeout of 20ms: context deadline exceeded") {
					t.Errorf("timeout message %q", last.Error.Message)
				}
			case "typed":
				if tc.status == envelope.StatusDead && !strings.Contains(last.Error.Message, `handler "typed" does not decode into rdq_test.typedArgs`) {
					t.Errorf("undecodable message %q", last.Error.Message)
				}
			case "mapper-result":
				if tc.payload == "REJECTED" && (last.Error.Message != "rejected: REJECTED" || string(last.Error.Detail) != `{"status":"REJECTED"}`) {
					t.Errorf("mapper error: %q %s", last.Error.Message, last.Error.Detail)
				}
			}
		}
	})
}

// namedError is an unclassified error whose %T, *rdq_test.namedError,
// matches both of the queue's glob lists: the non-retryable list wins.
type namedError struct{ name string }

func (e *namedError) Error() string { return e.name }

func TestDLQListShowRedriveAndExport(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		ctx := context.Background()
		q := queueName(t)
		configure(t, c, q, map[string]any{"max_attempts": 1})
		var fail atomic.Bool
		fail.Store(true)
		reg := rdq.NewRegistry()
		reg.Register("flaky", func(ctx context.Context, task envelope.Envelope) error {
			if fail.Load() {
				return rdq.PermanentAs("smtp."+string(task.Payload), errors.New("refused"))
			}
			return nil
		})
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = w.Run(wctx); close(done) }()
		var ids []string
		for _, kind := range []string{"Timeout", "Timeout", "Refused"} {
			ids = append(ids, submit(t, c, rdq.Task{Queue: q, HandlerRef: "flaky", Payload: []byte(kind)}).ID)
		}
		for _, id := range ids {
			waitFor(t, c, id, "DEAD", func(e envelope.Envelope) bool { return e.Status == envelope.StatusDead })
		}
		stop()
		<-done

		page, err := c.DLQList(ctx, q, rdq.DLQListOptions{ErrorType: "smtp.Time*"})
		if err != nil || len(page.Items) != 2 {
			t.Fatalf("list: %v, %d items", err, len(page.Items))
		}
		page, err = c.DLQList(ctx, q, rdq.DLQListOptions{Limit: 2})
		if err != nil || len(page.Items) != 2 || page.NextCursor == nil {
			t.Fatalf("first page: %v, %d items, cursor %v", err, len(page.Items), page.NextCursor)
		}
		rest, err := c.DLQList(ctx, q, rdq.DLQListOptions{Limit: 2, Cursor: *page.NextCursor})
		if err != nil || len(rest.Items) != 1 {
			t.Fatalf("second page: %v, %d items", err, len(rest.Items))
		}
		shown, err := c.DLQShow(ctx, q, ids[2])
		if err != nil || shown.ID != ids[2] || shown.LastError().Type != "smtp.Refused" {
			t.Fatalf("show: %v %+v", err, shown.LastError())
		}
		var exported []string
		if err := c.DLQExport(ctx, q, "", func(e envelope.Envelope) error { exported = append(exported, e.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(exported) != 3 {
			t.Fatalf("exported %d", len(exported))
		}
		dry, err := c.DLQRedrive(ctx, q, rdq.RedriveRequest{ErrorType: "smtp.Refused", DryRun: true})
		if err != nil || dry.Count != 1 || !dry.DryRun {
			t.Fatalf("dry run: %v %+v", err, dry)
		}
		red, err := c.DLQRedrive(ctx, q, rdq.RedriveRequest{IDs: []string{ids[2]}})
		if err != nil || red.Count != 1 || red.IDs[0] != ids[2] {
			t.Fatalf("redrive: %v %+v", err, red)
		}
		fail.Store(false)
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		env := waitFor(t, c, ids[2], "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		if env.RedriveCount != 1 || len(env.Attempts) != 2 {
			t.Fatalf("redriven task: redrive_count %d, %d attempts", env.RedriveCount, len(env.Attempts))
		}
	})
}

func TestALongHandlerKeepsItsLeaseByExtension(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"lease_ms": 1500})
		reg := rdq.NewRegistry()
		reg.Register("slow", func(ctx context.Context, task envelope.Envelope) error {
			select {
			case <-time.After(4000 * time.Millisecond): // more than two leases
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		id := submit(t, c, rdq.Task{Queue: q, HandlerRef: "slow"}).ID
		env := waitFor(t, c, id, "terminal", terminal)
		if env.Status != envelope.StatusSucceeded || len(env.Attempts) != 1 || env.ClaimCount != 1 {
			b, _ := env.Encode()
			t.Fatalf("the lease lapsed under a running handler: %s", b)
		}
	})
}

// An extension request slower than the extension interval (a third of the
// lease) but answered within the lease keeps the lease: the worker waits for
// it instead of giving up after one interval.
func TestASlowExtensionWithinTheLeaseKeepsIt(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"lease_ms": 2400}) // extensions every 800 ms, each answered after 1 s
		var slow *rdq.Client
		switch tr {
		case rdq.TransportHTTP:
			slow = newClient(t, proxyTo(t, url, func(r *http.Request, _ []byte) {
				if strings.HasSuffix(r.URL.Path, "/lease") {
					time.Sleep(time.Second)
				}
			}).URL)
		default:
			slow = newClientWith(t, rdq.ClientConfig{URL: url, GRPCDialOptions: []grpc.DialOption{
				grpc.WithStreamInterceptor(watchWork(nil, func(ack *rdqpb.WorkAck, extension bool) {
					if extension {
						time.Sleep(time.Second)
					}
				})),
			}})
		}
		causes := make(chan error, 1)
		reg := rdq.NewRegistry()
		reg.Register("slow", func(ctx context.Context, task envelope.Envelope) error {
			select {
			case <-time.After(5600 * time.Millisecond): // at least two slow extensions
				causes <- nil
				return nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return ctx.Err()
			}
		})
		runWorker(t, slow, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		id := submit(t, c, rdq.Task{Queue: q, HandlerRef: "slow"}).ID
		if err := <-causes; err != nil {
			t.Fatalf("the handler was cancelled: %v", err)
		}
		env := waitFor(t, c, id, "terminal", terminal)
		if env.Status != envelope.StatusSucceeded || len(env.Attempts) != 1 || env.ClaimCount != 1 {
			b, _ := env.Encode()
			t.Fatalf("the lease lapsed under a running handler: %s", b)
		}
	})
}

// proxyTo is an HTTP proxy to target that shows each request to look first
// (which may record or delay it), then forwards it.
func proxyTo(t *testing.T, target string, look func(r *http.Request, body []byte)) *httptest.Server {
	to, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(to)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		look(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return proxy
}

// The Worker's single lease keeper serves handlers that started at
// different times, and one lost lease cancels only its own handler.
func TestOneLeaseKeeperServesStaggeredHandlers(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"lease_ms": 1500})
		started := make(chan string, 3)
		causes := make(chan error, 3)
		reg := rdq.NewRegistry()
		reg.Register("slow", func(ctx context.Context, task envelope.Envelope) error {
			started <- task.ID
			select {
			case <-time.After(4000 * time.Millisecond): // more than two leases
				return nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return ctx.Err()
			}
		})
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		var ids []string
		for i := 0; i < 3; i++ { // one at a time: each starts after the previous one runs
			submit(t, c, rdq.Task{Queue: q, HandlerRef: "slow"})
			ids = append(ids, <-started)
		}
		if err := c.Delete(context.Background(), ids[1]); err != nil { // its lease can no longer be extended
			t.Fatal(err)
		}
		select {
		case err := <-causes:
			if !errors.Is(err, rdq.ErrLeaseLost) {
				t.Fatalf("cause %v; want ErrLeaseLost", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the deleted task's handler was never cancelled")
		}
		for _, id := range []string{ids[0], ids[2]} {
			env := waitFor(t, c, id, "terminal", terminal)
			if env.Status != envelope.StatusSucceeded || len(env.Attempts) != 1 || env.ClaimCount != 1 {
				b, _ := env.Encode()
				t.Fatalf("a lease lapsed under a running handler: %s", b)
			}
		}
		select {
		case err := <-causes:
			t.Fatalf("another handler was cancelled too: %v", err)
		default:
		}
	})
}

func TestALostLeaseCancelsTheHandlersContext(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"lease_ms": 600})
		started := make(chan string, 1)
		cause := make(chan error, 1)
		reg := rdq.NewRegistry()
		reg.Register("wait", func(ctx context.Context, task envelope.Envelope) error {
			started <- task.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		submit(t, c, rdq.Task{Queue: q, HandlerRef: "wait"})
		id := <-started
		if err := c.Delete(context.Background(), id); err != nil { // the lease can no longer be extended
			t.Fatal(err)
		}
		select {
		case err := <-cause:
			if !errors.Is(err, rdq.ErrLeaseLost) {
				t.Fatalf("cause %v; want ErrLeaseLost", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handler's context was never cancelled")
		}
	})
}

func TestShutdownFinishesWhatItCanAndHandsBackTheRest(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		started := make(chan string, 2)
		finish := make(chan struct{})
		stuckCause := make(chan error, 1)
		reg := rdq.NewRegistry()
		reg.Register("quick-after-signal", func(ctx context.Context, task envelope.Envelope) error {
			started <- task.ID
			<-finish
			return nil
		})
		reg.Register("stuck", func(ctx context.Context, task envelope.Envelope) error {
			started <- task.ID
			<-ctx.Done()
			stuckCause <- context.Cause(ctx)
			return ctx.Err()
		})
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		quick := submit(t, c, rdq.Task{Queue: q, HandlerRef: "quick-after-signal"}).ID
		stuck := submit(t, c, rdq.Task{Queue: q, HandlerRef: "stuck"}).ID
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-started
		<-started
		cancel() // shutdown begins; the quick handler finishes within the grace
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := <-stuckCause; !errors.Is(err, rdq.ErrShutdown) {
			t.Fatalf("the stuck handler's cause is %v", err)
		}
		env, err := c.Get(context.Background(), quick)
		if err != nil || env.Status != envelope.StatusSucceeded {
			t.Fatalf("the finished task: %v %s", err, env.Status)
		}
		env, err = c.Get(context.Background(), stuck)
		if err != nil || env.Status != envelope.StatusPending || env.AttemptCount != 0 {
			b, _ := env.Encode()
			t.Fatalf("the unfinished task was not handed back unspent: %v %s", err, b)
		}
		// Nothing claims after shutdown: a new task stays pending.
		late := submit(t, c, rdq.Task{Queue: q, HandlerRef: "quick-after-signal"}).ID
		time.Sleep(200 * time.Millisecond)
		if env, _ := c.Get(context.Background(), late); env.Status != envelope.StatusPending {
			t.Fatalf("a task was claimed after shutdown: %s", env.Status)
		}
	})
}

func TestAWorkerKilledMidTaskLeavesALeaseExpiredAttempt(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"lease_ms": 800, "backoff": map[string]any{"kind": "none"}})
		id := submit(t, c, rdq.Task{Queue: q, HandlerRef: "hang"}).ID

		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		child := exec.Command(self, "-test.run=^$")
		child.Env = append(os.Environ(), childEnv+"=1", "RDQ_GO_SDK_CHILD_URL="+url, "RDQ_GO_SDK_CHILD_QUEUE="+q,
			"RDQ_GO_SDK_CHILD_TRANSPORT="+tr.String())
		stdout, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "started "+id {
			_ = child.Process.Kill()
			t.Fatalf("the child did not start the task: %q %v", line, err)
		}
		// Across several lease lengths the child keeps the lease by extension.
		time.Sleep(2 * time.Second)
		if env, _ := c.Get(context.Background(), id); env.Status != envelope.StatusInFlight || len(env.Attempts) != 1 {
			t.Fatalf("the running child lost its lease: %s, %d attempts", env.Status, len(env.Attempts))
		}
		if err := child.Process.Kill(); err != nil { // SIGKILL: no shutdown, no release
			t.Fatal(err)
		}
		_ = child.Wait()

		waitFor(t, c, id, "reaped", func(e envelope.Envelope) bool {
			return len(e.Attempts) > 0 && e.Attempts[0].Outcome == envelope.OutcomeLeaseExpired
		})
		reg := rdq.NewRegistry()
		reg.Register("hang", func(ctx context.Context, task envelope.Envelope) error { return nil })
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		env := waitFor(t, c, id, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		if len(env.Attempts) != 2 || env.Attempts[0].Error == nil || env.Attempts[0].Error.Type != "rdq.LeaseExpired" ||
			env.Attempts[1].Outcome != envelope.OutcomeSuccess {
			b, _ := env.Encode()
			t.Fatalf("history: %s", b)
		}
	})
}

func TestABearerTokenIsSentAndRequired(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/rdq.toml"
	if err := os.WriteFile(cfg, []byte(`[[tokens]]
name = "go-sdk-test"
token = "a-long-enough-secret-token"
scopes = ["submit", "work", "admin"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dir+"/data", "--config", cfg)
	defer s.stop()
	for _, tr := range submitTransports {
		anon := newClientWith(t, rdq.ClientConfig{URL: s.url, SubmitTransport: tr})
		if _, err := anon.Submit(context.Background(), rdq.Task{Queue: "q", HandlerRef: "h"}); rdq.ErrorCode(err) != rdq.CodeUnauthenticated {
			t.Fatalf("%v, without a token: %v", tr, err)
		}
		authed := newClientWith(t, rdq.ClientConfig{URL: s.url, Token: "a-long-enough-secret-token", SubmitTransport: tr})
		sub, err := authed.Submit(context.Background(), rdq.Task{Queue: "q", HandlerRef: "h"})
		if err != nil {
			t.Fatalf("%v: %v", tr, err)
		}
		if sub.Envelope.Headers["rdq.submitted_by"] != "go-sdk-test" {
			t.Fatalf("%v: submitted_by %q", tr, sub.Envelope.Headers["rdq.submitted_by"])
		}
	}
}

func TestClaimsAndSettlesTravelInBatches(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		var mu sync.Mutex
		var claims, settles []int // tasks asked for per claim (credits of a stream), items per settle
		singles := 0
		var watched *rdq.Client
		switch tr {
		case rdq.TransportHTTP:
			watched = newClient(t, proxyTo(t, url, func(r *http.Request, body []byte) {
				var req struct {
					Max     int               `json:"max"`
					Settles []json.RawMessage `json:"settles"`
				}
				_ = json.Unmarshal(body, &req)
				mu.Lock()
				switch {
				case strings.HasSuffix(r.URL.Path, "/claim"):
					claims = append(claims, req.Max)
				case r.URL.Path == "/v1/settle":
					settles = append(settles, len(req.Settles))
				case strings.HasSuffix(r.URL.Path, "/settle"):
					singles++
				}
				mu.Unlock()
			}).URL)
		default:
			watched = newClientWith(t, rdq.ClientConfig{URL: url, GRPCDialOptions: []grpc.DialOption{
				grpc.WithStreamInterceptor(watchWork(func(req *rdqpb.WorkRequest) {
					mu.Lock()
					defer mu.Unlock()
					if h := req.GetHello(); h != nil {
						claims = append(claims, int(h.GetCredits()))
					}
					if s := req.GetSettle(); s != nil {
						settles = append(settles, len(s.GetSettles()))
					}
				}, nil)),
			}})
		}

		const n = 48
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, submit(t, c, rdq.Task{Queue: q, HandlerRef: "gate"}).ID)
		}
		// Handlers of one claim return together, so their outcomes queue up together.
		var started atomic.Int32
		gate := make(chan struct{})
		reg := rdq.NewRegistry()
		reg.Register("gate", func(ctx context.Context, task envelope.Envelope) error {
			if started.Add(1) == 16 {
				close(gate)
			}
			<-gate
			return nil
		})
		runWorker(t, watched, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, Concurrency: 16, PollInterval: 20 * time.Millisecond})
		for _, id := range ids {
			waitFor(t, c, id, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		}
		mu.Lock()
		defer mu.Unlock()
		total, most := 0, 0
		for _, s := range settles {
			total += s
			most = max(most, s)
		}
		if len(claims) == 0 || claims[0] != 16 {
			t.Fatalf("claims asked for %v", claims)
		}
		if tr == rdq.TransportGRPC {
			// One stream, its credits the handler slots; the 16 outcomes
			// released together share a settle or two, and the rest, handed
			// out a quarter of the credits at a time, settle in groups too.
			if len(claims) != 1 || total != n || most < 8 || len(settles) > n/2 {
				t.Fatalf("streams opened with credits %v; settles %v", claims, settles)
			}
			return
		}
		// The 16 outcomes released together share a request or two (they
		// wait up to SettleLinger for each other), not one request each.
		if singles != 0 || total != n || most < 8 || len(settles) > n/4 {
			t.Fatalf("settles: %d single, batches %v", singles, settles)
		}
		// Slots freed together are claimed together (ClaimLinger), not
		// one claim per freed slot.
		small := 0
		for _, m := range claims {
			if m < 8 {
				small++
			}
		}
		if small > 2 {
			t.Fatalf("claims asked for %v", claims)
		}
	})
}

func TestAWorkerClaimsFromEveryQueueItServesAndNoOther(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		a, b, other := queueName(t)+"-a", queueName(t)+"-b", queueName(t)+"-c"
		reg := rdq.NewRegistry()
		reg.Register("h", func(ctx context.Context, task envelope.Envelope) error { return nil })
		ta := submit(t, c, rdq.Task{Queue: a, HandlerRef: "h"}).ID
		tb := submit(t, c, rdq.Task{Queue: b, HandlerRef: "h"}).ID
		tc := submit(t, c, rdq.Task{Queue: other, HandlerRef: "h"}).ID
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{a, b}, Registry: reg, PollInterval: 20 * time.Millisecond})
		for _, id := range []string{ta, tb} {
			waitFor(t, c, id, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		}
		if env, err := c.Get(context.Background(), tc); err != nil || env.Status != envelope.StatusPending || env.ClaimCount != 0 {
			t.Fatalf("a queue the worker does not serve was claimed: %v %s", err, env.Status)
		}
	})
}

// Prefetched tasks wait under their leases for a free handler, and those
// still waiting at shutdown are handed back unrun.
func TestPrefetchedTasksWaitForAHandlerAndAreHandedBackUnrun(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		started := make(chan string, 3)
		reg := rdq.NewRegistry()
		reg.Register("block", func(ctx context.Context, task envelope.Envelope) error {
			started <- task.ID
			<-ctx.Done()
			return ctx.Err()
		})
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, submit(t, c, rdq.Task{Queue: q, HandlerRef: "block"}).ID)
		}
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg,
			Concurrency: 1, Prefetch: 2, PollInterval: 20 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		first := <-started
		for _, id := range ids { // one running, two held for it
			waitFor(t, c, id, "IN_FLIGHT", func(e envelope.Envelope) bool { return e.Status == envelope.StatusInFlight })
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(started)
		for id := range started {
			t.Fatalf("%s started beside %s with one handler", id, first)
		}
		for _, id := range ids {
			env, err := c.Get(context.Background(), id)
			if err != nil || env.Status != envelope.StatusPending || env.AttemptCount != 0 || env.ClaimCount != 1 {
				b, _ := env.Encode()
				t.Fatalf("not handed back unspent: %v %s", err, b)
			}
		}
	})
}
