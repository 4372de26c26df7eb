package rdq_test

// Cancelling a running task, against fakes: a WorkCancel on the stream, an
// extension's answer on the stream (bare, or with the envelope) and over
// HTTP each stop the handler, with the request as its context's cause, and
// what the handler then returns is settled as the cancel says.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

func TestACancelledErrorNamesWhoAskedAndIsCancelled(t *testing.T) {
	ce := &rdq.CancelledError{By: "ops", Message: "customer withdrew"}
	if ce.Error() != "cancelled by ops: customer withdrew" {
		t.Fatal(ce.Error())
	}
	if (&rdq.CancelledError{By: "ops"}).Error() != "cancelled by ops: no reason given" {
		t.Fatal("without a message")
	}
	if (&rdq.CancelledError{}).Error() != "cancelled" {
		t.Fatal("who asked unknown")
	}
	if !errors.Is(ce, rdq.ErrCancelled) || !errors.Is(ce, context.Canceled) || errors.Is(ce, rdq.ErrLeaseLost) {
		t.Fatal("errors.Is")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if _, ok := rdq.CancelRequested(ctx); ok {
		t.Fatal("a live context was cancelled")
	}
	cancel(ce)
	derived, stop := context.WithTimeout(ctx, time.Hour)
	defer stop()
	if got, ok := rdq.CancelRequested(derived); !ok || got != ce {
		t.Fatalf("%v %v", got, ok)
	}
	lost, cancelLost := context.WithCancelCause(context.Background())
	cancelLost(rdq.ErrLeaseLost)
	if _, ok := rdq.CancelRequested(lost); ok {
		t.Fatal("a lost lease is not a cancel")
	}
}

// cancellingWorkers hands out one task, pushes what the test puts on push,
// acks settles (reporting them on settles) and answers extensions with what
// extended says.
type cancellingWorkers struct {
	rdqpb.UnimplementedWorkersServer
	task     *rdqpb.LeasedTask
	push     chan *rdqpb.WorkResponse
	settles  chan *rdqpb.SettleRequest
	extended func() *rdqpb.SettleItemResult
}

func newCancellingWorkers(task *rdqpb.LeasedTask) *cancellingWorkers {
	return &cancellingWorkers{task: task, push: make(chan *rdqpb.WorkResponse, 4), settles: make(chan *rdqpb.SettleRequest, 4),
		extended: func() *rdqpb.SettleItemResult { return &rdqpb.SettleItemResult{} }}
}

func (f *cancellingWorkers) Work(stream rdqpb.Workers_WorkServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	var mu sync.Mutex
	send := func(m *rdqpb.WorkResponse) error { mu.Lock(); defer mu.Unlock(); return stream.Send(m) }
	if err := send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: f.task}}); err != nil {
		return err
	}
	go func() {
		for {
			select {
			case m := <-f.push:
				_ = send(m)
			case <-stream.Context().Done():
				return
			}
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		ack := &rdqpb.WorkAck{}
		switch {
		case req.GetSettle() != nil:
			ack.Seq = req.GetSettle().GetSeq()
			for _, item := range req.GetSettle().GetSettles() {
				f.settles <- item
				ack.Results = append(ack.Results, &rdqpb.SettleItemResult{Id: item.GetId()})
			}
		case req.GetExtend() != nil:
			ack.Seq = req.GetExtend().GetSeq()
			r := f.extended()
			r.Id = req.GetExtend().GetExtend().GetId()
			ack.Results = append(ack.Results, r)
		default:
			continue
		}
		if err := send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

func workCancel(task *rdqpb.LeasedTask, token, by string) *rdqpb.WorkResponse {
	msg := "customer withdrew"
	return &rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Cancel{Cancel: &rdqpb.WorkCancel{
		Id: task.GetId(), LeaseToken: token,
		Request: &rdqpb.CancelRequest{At: "2026-07-20T14:03:30.000Z", By: by, Message: &msg},
	}}}
}

// blockingHandler waits for its context, tells started when it began and
// seen what stopped it, and returns ctx.Err() (or nil when succeed says so).
func blockingHandler(started chan<- struct{}, seen chan<- error, succeed bool) rdq.Handler {
	return func(ctx context.Context, task envelope.Envelope) error {
		started <- struct{}{}
		<-ctx.Done()
		seen <- context.Cause(ctx)
		if succeed {
			return nil
		}
		return ctx.Err()
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func TestAWorkCancelStopsTheHandlerAndItsFailureIsSettledAsCancelled(t *testing.T) {
	task := leasedTask("h", nil)
	fake := newCancellingWorkers(task)
	c := newClient(t, serveFake(t, fake))
	started, seen := make(chan struct{}, 1), make(chan error, 1)
	reg := rdq.NewRegistry()
	reg.Register("h", blockingHandler(started, seen, false))
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg, Concurrency: 2})

	receive(t, started, "start")
	// One for another lease of the task (an earlier claim) is not this run's.
	fake.push <- workCancel(task, "token-of-an-earlier-claim", "someone-else")
	fake.push <- workCancel(task, task.GetLeaseToken(), "ops@example.com")
	cause := receive(t, seen, "cancel")
	ce, ok := cause.(*rdq.CancelledError)
	if !ok || ce.By != "ops@example.com" || ce.Message != "customer withdrew" ||
		ce.At.Format(time.RFC3339Nano) != "2026-07-20T14:03:30Z" || !errors.Is(cause, rdq.ErrCancelled) {
		t.Fatalf("cause %#v", cause)
	}
	s := receive(t, fake.settles, "settle")
	if s.GetId() != task.GetId() || s.GetOutcome() != rdqpb.ReportedOutcome_REPORTED_PERMANENT_FAILURE ||
		s.GetError().GetType() != rdq.CancelledErrorType || s.GetError().GetMessage() != "cancelled by ops@example.com: customer withdrew" {
		t.Fatalf("settle %v", s)
	}
}

func TestAHandlerThatSucceedsAfterACancelKeepsItsSuccess(t *testing.T) {
	task := leasedTask("h", nil)
	fake := newCancellingWorkers(task)
	c := newClient(t, serveFake(t, fake))
	started, seen := make(chan struct{}, 1), make(chan error, 1)
	reg := rdq.NewRegistry()
	reg.Register("h", blockingHandler(started, seen, true))
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg})

	receive(t, started, "start")
	// No lease token: any lease of the task; no request: who asked is unknown.
	fake.push <- &rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Cancel{Cancel: &rdqpb.WorkCancel{Id: task.GetId()}}}
	if cause := receive(t, seen, "cancel"); !errors.Is(cause, rdq.ErrCancelled) {
		t.Fatalf("cause %v", cause)
	}
	if s := receive(t, fake.settles, "settle"); s.GetOutcome() != rdqpb.ReportedOutcome_REPORTED_SUCCESS || s.GetError() != nil {
		t.Fatalf("settle %v", s)
	}
}

// shortLease is a task whose lease is extended every 100 ms.
func shortLease(task *rdqpb.LeasedTask) *rdqpb.LeasedTask {
	started := task.GetEnvelope().GetAttempts()[0].GetStartedAt()
	at, _ := envelope.ParseTimestamp(started)
	end := envelope.FormatTimestamp(at.Add(300 * time.Millisecond))
	task.Envelope.LeaseExpiresAt = &end
	return task
}

func TestAnExtensionAnsweredWithACancelStopsTheHandler(t *testing.T) {
	for _, bare := range []bool{true, false} {
		name := "envelope"
		if bare {
			name = "bare"
		}
		t.Run(name, func(t *testing.T) {
			task := shortLease(leasedTask("h", nil))
			fake := newCancellingWorkers(task)
			started, seen := make(chan struct{}, 1), make(chan error, 1)
			var mu sync.Mutex
			asked := false
			fake.extended = func() *rdqpb.SettleItemResult {
				mu.Lock()
				defer mu.Unlock()
				if !asked {
					return &rdqpb.SettleItemResult{}
				}
				if bare {
					return &rdqpb.SettleItemResult{CancelRequested: true}
				}
				env := proto.Clone(task.GetEnvelope()).(*rdqpb.Envelope)
				msg := "stop it"
				env.CancelRequested = &rdqpb.CancelRequest{At: "2026-07-20T14:03:30.000Z", By: "ops", Message: &msg}
				env.Omitted = []string{"payload_ref", "dead_reason"}
				return &rdqpb.SettleItemResult{Envelope: env, CancelRequested: true}
			}
			c := newClient(t, serveFake(t, fake))
			reg := rdq.NewRegistry()
			reg.Register("h", blockingHandler(started, seen, false))
			cfg := rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg}
			if !bare {
				cfg.OnDeadLetter = func(context.Context, envelope.Envelope) {}
			}
			runWorker(t, c, cfg)

			receive(t, started, "start")
			time.Sleep(250 * time.Millisecond) // a plain extension or two first
			mu.Lock()
			asked = true
			mu.Unlock()
			cause := receive(t, seen, "cancel")
			ce, ok := cause.(*rdq.CancelledError)
			switch {
			case !ok:
				t.Fatalf("cause %v", cause)
			case bare && (ce.By != "" || ce.Error() != "cancelled"): // the fake serves no HTTP to read the request from
				t.Fatalf("bare: %#v", ce)
			case !bare && (ce.By != "ops" || ce.Message != "stop it"):
				t.Fatalf("envelope: %#v", ce)
			}
			s := receive(t, fake.settles, "settle")
			if s.GetError().GetType() != rdq.CancelledErrorType || !strings.HasPrefix(s.GetError().GetMessage(), "cancelled") {
				t.Fatalf("settle %v", s)
			}
		})
	}
}

func TestAnHTTPExtensionAnsweredWithACancelStopsTheHandler(t *testing.T) {
	now := time.Now()
	env := envelope.New("fake", "h", []byte(`{}`), "application/json", now)
	env.Status = envelope.StatusInFlight
	env.AttemptCount, env.ClaimCount = 1, 1
	end := now.Add(300 * time.Millisecond).UTC().Truncate(time.Millisecond)
	env.LeaseExpiresAt, env.NextAttemptAt = &end, nil
	env.Attempts = []envelope.Attempt{{AttemptNo: 1, StartedAt: env.CreatedAt}}
	claimed, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	extensions, claims := 0, 0
	settled := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/claim"):
			claims++
			if claims > 1 {
				_, _ = w.Write([]byte(`{"tasks":[]}`))
				return
			}
			_, _ = w.Write([]byte(`{"tasks":[{"id":"` + env.ID + `","lease_token":"tok","envelope":` + string(claimed) + `}]}`))
		case r.URL.Path == "/v1/tasks/"+env.ID+"/lease":
			extensions++
			answer := env
			if extensions >= 2 {
				msg := "stop it"
				answer.CancelRequested = &envelope.CancelRequest{At: now.UTC().Truncate(time.Millisecond), By: "ops", Message: &msg}
			}
			b, _ := answer.Encode()
			_, _ = w.Write(b)
		case r.URL.Path == "/v1/settle":
			settled <- string(body)
			_, _ = w.Write([]byte(`{"results":[{"id":"` + env.ID + `","status":200}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	started, seen := make(chan struct{}, 1), make(chan error, 1)
	reg := rdq.NewRegistry()
	reg.Register("h", blockingHandler(started, seen, false))
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportHTTP, Queues: []string{"fake"}, Registry: reg, Concurrency: 1,
		PollInterval: 20 * time.Millisecond})

	receive(t, started, "start")
	cause := receive(t, seen, "cancel")
	if ce, ok := rdq.CancelRequested(contextWithCause(cause)); !ok || ce.By != "ops" || ce.Message != "stop it" {
		t.Fatalf("cause %#v", cause)
	}
	var body struct {
		Settles []rdq.Settle `json:"settles"`
	}
	if err := json.Unmarshal([]byte(receive(t, settled, "settle")), &body); err != nil || len(body.Settles) != 1 {
		t.Fatalf("settle %v %+v", err, body)
	}
	if s := body.Settles[0]; s.Outcome != rdq.SettlePermanentFailure || s.Error == nil ||
		s.Error.Type != "rdq.Cancelled" || s.Error.Message != "cancelled by ops: stop it" {
		t.Fatalf("settle %+v %+v", s, s.Error)
	}
}

// contextWithCause is a context cancelled with cause.
func contextWithCause(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}

func TestATaskCancelledWhileItWaitsForASlotIsNotRun(t *testing.T) {
	first, second := leasedTask("h", nil), leasedTask("h", nil)
	fake := &twoTasks{cancellingWorkers: newCancellingWorkers(first), second: second}
	c := newClient(t, serveFake(t, fake))
	started, seen := make(chan struct{}, 2), make(chan error, 2)
	reg := rdq.NewRegistry()
	reg.Register("h", blockingHandler(started, seen, true))
	// One handler slot and one prefetched task: the second waits.
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg,
		Concurrency: 1, Prefetch: 1})
	receive(t, started, "start")
	time.Sleep(100 * time.Millisecond) // the second task has arrived
	fake.push <- workCancel(second, second.GetLeaseToken(), "ops")
	s := receive(t, fake.settles, "the waiting task's settle")
	if s.GetId() != second.GetId() || s.GetError().GetType() != rdq.CancelledErrorType {
		t.Fatalf("settle %v", s)
	}
	select {
	case <-started:
		t.Fatal("the cancelled task was run")
	default:
	}
	fake.push <- workCancel(first, "", "ops") // the first handler succeeds all the same
	if s := receive(t, fake.settles, "the running task's settle"); s.GetId() != first.GetId() || s.GetOutcome() != rdqpb.ReportedOutcome_REPORTED_SUCCESS {
		t.Fatalf("settle %v", s)
	}
}

// twoTasks is cancellingWorkers handing out a second task right after the first.
type twoTasks struct {
	*cancellingWorkers
	second *rdqpb.LeasedTask
}

func (f *twoTasks) Work(stream rdqpb.Workers_WorkServer) error {
	f.push <- &rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: f.second}}
	return f.cancellingWorkers.Work(stream)
}

func TestCancelSendsPendingOnlyAndReadsRunning(t *testing.T) {
	bodies := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		bodies <- body
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"queue":"q","dry_run":false,"count":2,"ids":["A","B"],"running":["B"]}`))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	res, err := c.Cancel(context.Background(), "q", rdq.CancelRequest{IDs: []string{"A", "B"}, PendingOnly: true})
	if err != nil || res.Count != 2 || len(res.Running) != 1 || res.Running[0] != "B" {
		t.Fatalf("%v %+v", err, res)
	}
	if body := <-bodies; body["pending_only"] != true {
		t.Fatalf("sent %v", body)
	}
	if _, err := c.Cancel(context.Background(), "q", rdq.CancelRequest{}); err != nil {
		t.Fatal(err)
	}
	if body := <-bodies; body["pending_only"] != nil {
		t.Fatalf("sent %v", body)
	}
}
