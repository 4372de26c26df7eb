package rdq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// Causes of a handler context's cancellation (context.Cause(ctx)).
var (
	// ErrLeaseLost: the lease could not be extended; another worker may
	// already hold the task, so the handler should stop. Its result is dropped.
	ErrLeaseLost = errors.New("rdq: the task's lease was lost")
	// ErrShutdown: the worker's shutdown grace ran out; the task has been
	// handed back (RELEASE) and the handler's result is dropped.
	ErrShutdown = errors.New("rdq: the worker shut down before the handler finished")
)

// Transport is how a Worker takes tasks and reports their outcomes.
type Transport uint8

const (
	// TransportAuto (the default) works on the gRPC Work stream, and falls
	// back to HTTP for the rest of Run when the server offers no gRPC: the
	// stream is refused as UNIMPLEMENTED, or fails without an rdq code
	// while the server answers HTTP (an HTTP/1-only proxy in between, say).
	TransportAuto Transport = iota
	// TransportGRPC works on the Work stream only: failures to open it are
	// reported (OnError) and it is opened again after PollInterval.
	TransportGRPC
	// TransportHTTP polls with POST /v1/queues/{q}/claim and settles with
	// POST /v1/settle, extends with POST /v1/tasks/{id}/lease.
	TransportHTTP
)

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportGRPC:
		return "grpc"
	case TransportHTTP:
		return "http"
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// WorkerConfig configures a Worker. Queues and Registry are required.
type WorkerConfig struct {
	// Queues to claim from, in turn.
	Queues   []string
	Registry *Registry
	// Transport: the Work stream (gRPC) or HTTP polling; default
	// TransportAuto, the stream with a fallback to HTTP.
	Transport Transport
	// Concurrency is how many handlers run at once (default 64). On the
	// Work stream it is the stream's credits: the server hands out no more
	// tasks than that at once.
	Concurrency int
	// Prefetch is how many tasks the worker holds ready beyond its free
	// handler slots, so the next tasks are on their way while the handlers
	// work: on the stream, its credits are Concurrency + Prefetch; over
	// HTTP, claims ask for as many more. Each waits under its own lease
	// (extended like a running one); those still waiting at shutdown are
	// handed back unrun (RELEASE). Default (0): adaptive, what the
	// handlers start in 50 ms at the rate they have been starting tasks, at
	// most 1,024, and none while any of Queues is under flow control (its
	// policy has a flow section; the policies are read every 5 s); a Work
	// stream keeps the most credits it was given until it is opened again.
	// NoPrefetch: none; a positive number: exactly that many.
	Prefetch int
	// ClaimBatch is the most tasks one HTTP claim asks for (default 64, at most 1000).
	ClaimBatch int
	// SettleBatch is the most outcomes one POST /v1/settle carries (default 512, at most 1000).
	SettleBatch int
	// ClaimConcurrency is how many HTTP claims may be in flight at once (default
	// 2), so one claim's round trip overlaps another's; free handler slots
	// are reserved before each claim, so together they never claim more than
	// Concurrency allows.
	ClaimConcurrency int
	// PollInterval is the wait after a round of HTTP claims found nothing,
	// and before a Work stream that failed is opened again (default 200 ms).
	PollInterval time.Duration
	// SettleLinger is how long an outcome may wait for others to share its
	// settle (a POST /v1/settle, or a WorkSettle on the stream), until a claim's worth (ClaimBatch, at most
	// Concurrency) has gathered
	// (default 1 ms; negative: send what is there at once). Fewer, larger
	// settles cost the server less per task; handler slots are freed when
	// the handler returns, not when its outcome is sent.
	SettleLinger time.Duration
	// ClaimLinger is how long an HTTP claim may wait for more handler slots to
	// free up, until a claim's worth (ClaimBatch, at most Concurrency)
	// is free (default 1 ms; negative: claim for whatever is free at once).
	// Without it, fast handlers free their slots one by one and each claim
	// asks for a few tasks.
	ClaimLinger time.Duration
	// Lease overrides the queue's lease_ms for claims. The lease is extended
	// automatically every third of it while a handler runs.
	Lease time.Duration
	// ShutdownGrace is how long running handlers get, once Run's context is
	// cancelled, before their contexts are cancelled (cause ErrShutdown) and
	// their tasks handed back with RELEASE (default 30 s).
	ShutdownGrace time.Duration
	// Classifiers decide retryable vs permanent for errors no wrapper forced
	// (the ladder's code-classifier rung); the first match wins.
	Classifiers []Classifier
	// OutcomeMapper, when set, is authoritative for every handler that has
	// no mapper of its own.
	OutcomeMapper OutcomeMapper
	// OnDeadLetter is called (from the settling goroutine: keep it short)
	// with each envelope a settle answered with status DEAD.
	OnDeadLetter func(ctx context.Context, task envelope.Envelope)
	// OnError receives background errors: failed claims, settles and lease
	// extensions, a Work stream that failed, the fallback to HTTP.
	// Default: ignored.
	OnError func(err error)
	// Schedules are declared in code (docs/schedules.md): Run stores each
	// by name, owned by code, before it takes any task (PUT
	// /v1/schedules/{name}?owner=code), replacing the stored definition
	// while its cursor and counters stay. A declaration the server refuses
	// makes Run return its *Error (the code names the rule: INVALID_CRON,
	// UNKNOWN_TIME_ZONE, …); those before it are stored. Then the
	// schedules put by code that none of these names are reported
	// (UndeclaredSchedules, and a warning to Logger), never deleted. The
	// worker does not fire schedules: the scheduler of every `rdq serve`
	// node does.
	Schedules []Schedule
	// Logger receives the worker's notices: a schedule put by code and
	// declared no more (a warning), each declared schedule stored (debug).
	// Default: slog.Default().
	Logger *slog.Logger
}

// Worker runs handlers for claimed tasks. Make one with NewWorker and call Run.
type Worker struct {
	client *Client
	cfg    WorkerConfig

	started  atomic.Bool
	inflight atomic.Int64
	slotFree chan struct{}
	// begun counts handler starts (the adaptive prefetch's pace); ahead is
	// the prefetch now (paceLoop's, or the fixed Prefetch).
	begun atomic.Uint64
	ahead atomic.Int64

	mu sync.Mutex // guards running, closed and every task's state change
	// running holds the runs by task id: whatever ends one task early
	// (a lost lease, shutdown, a notice from the server) finds it here.
	running  map[string]*run
	closed   bool
	settleCh chan settleItem

	handlers   sync.WaitGroup
	settlers   sync.WaitGroup
	registered map[string]registered // the Registry as Run found it
	// untraced is the handlers' base context for tasks without a trace
	// context (made once: most tasks have none).
	untraced context.Context
	// runs feeds the handler goroutines, Concurrency of them for the whole
	// of Run: a goroutine per task would pay for its start and for growing
	// its stack every time.
	runs chan *run

	// stream is the Work stream open now (nil before the first, and over
	// HTTP); settles and extensions go on it while it takes messages.
	stream atomic.Pointer[workStream]
	acking sync.WaitGroup // settles on a stream whose ack is due

	// One lease keeper per Worker (leaseLoop) extends the leases of all
	// running handlers, instead of a goroutine and a ticker per handler.
	leaseWake   chan struct{} // wakes the keeper early: a run is due sooner than it planned
	leaseWakeAt time.Time     // the keeper's planned wake-up; zero when it waits for a run (guarded by mu)
	leaseStop   chan struct{}
	leaseDone   chan struct{}
	extenders   sync.WaitGroup // extension requests in flight

	// undeclared are the schedules put by code that Schedules does not
	// name, once Run has stored its own (guarded by declMu).
	declMu     sync.Mutex
	undeclared []string
}

type runState uint8

const (
	stateRunning runState = iota
	stateDone
	stateReleased
	stateLost
)

// run is one claimed task being worked.
type run struct {
	worker *Worker
	task   ClaimedTask
	ctx    context.Context // the handler's
	cancel context.CancelCauseFunc
	state  runState // guarded by Worker.mu
	began  bool     // a handler goroutine has taken it (guarded by Worker.mu)
	// from is the Work stream that handed the task out (nil over HTTP):
	// settling it there gives the stream its credit back.
	from *workStream

	// Lease keeping, all guarded by Worker.mu: the lease length and the
	// extension interval (a third of it), when the lease ends as far as this
	// worker knows, when the next extension is due, whether the handler has
	// returned, and the extension in flight (closed when it ends; nil when none).
	lease, interval time.Duration
	deadline, next  time.Time
	finished        bool
	extending       chan struct{}
	// cancelled is the cancel asked of the task while it ran (nil: none
	// known), guarded by Worker.mu.
	cancelled *CancelledError
	// settledElsewhere: the handler settled the task itself
	// (SettledElsewhere), so the worker sends no settle (guarded by Worker.mu).
	settledElsewhere bool
}

type settleItem struct {
	settle Settle
	from   *workStream // the stream that handed the task out, if any
}

// NewWorker checks cfg and makes a Worker.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("rdq: NewWorker needs a client")
	}
	if cfg.Transport > TransportHTTP {
		return nil, fmt.Errorf("rdq: WorkerConfig.Transport %v is not a transport", cfg.Transport)
	}
	if cfg.Registry == nil {
		return nil, errors.New("rdq: WorkerConfig.Registry is required")
	}
	if len(cfg.Queues) == 0 {
		return nil, errors.New("rdq: WorkerConfig.Queues is empty")
	}
	for _, q := range cfg.Queues {
		if err := envelope.ValidateQueueName(q); err != nil {
			return nil, localError(err)
		}
	}
	cfg.Schedules = slices.Clone(cfg.Schedules)
	names := make(map[string]bool, len(cfg.Schedules))
	for i := range cfg.Schedules {
		s := &cfg.Schedules[i]
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("rdq: WorkerConfig.Schedules[%d] (%q): %w", i, s.Name, err)
		}
		if names[s.Name] {
			return nil, &Error{Code: CodeInvalidArgument, Field: "schedules",
				Detail: fmt.Sprintf("schedule %s is declared twice", s.Name)}
		}
		names[s.Name] = true
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.Prefetch < 0 {
		cfg.Prefetch = NoPrefetch
	}
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 64
	}
	cfg.ClaimBatch = min(cfg.ClaimBatch, 1000)
	if cfg.ClaimLinger == 0 {
		cfg.ClaimLinger = time.Millisecond
	}
	if cfg.SettleLinger == 0 {
		cfg.SettleLinger = time.Millisecond
	}
	if cfg.SettleBatch <= 0 {
		cfg.SettleBatch = 512
	}
	cfg.SettleBatch = min(cfg.SettleBatch, 1000)
	if cfg.ClaimConcurrency <= 0 {
		cfg.ClaimConcurrency = 2
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	w := &Worker{
		client:    client,
		cfg:       cfg,
		slotFree:  make(chan struct{}, 1),
		running:   map[string]*run{},
		leaseWake: make(chan struct{}, 1),
		leaseStop: make(chan struct{}),
		leaseDone: make(chan struct{}),
	}
	w.settleCh = make(chan settleItem, 2*(cfg.Concurrency+w.mostAhead())+cfg.SettleBatch)
	if cfg.Prefetch > 0 {
		w.ahead.Store(int64(cfg.Prefetch))
	}
	return w, nil
}

func (w *Worker) report(err error) {
	if w.cfg.OnError != nil && err != nil {
		w.cfg.OnError(err)
	}
}

// settlers is how many settle requests of one Worker may be in flight at
// once; one goroutine gathers the outcomes into batches for them.
const settlers = 2

// requestTimeout bounds each background request (claims, settles, lease
// extensions), which do not follow Run's context so that shutdown never
// abandons a claim half made.
const requestTimeout = 30 * time.Second

// Run claims and works tasks until ctx is cancelled, then shuts down
// gracefully: it stops claiming (a Work stream is closed, so the server
// hands out nothing more), gives running handlers ShutdownGrace to finish,
// hands back (RELEASE) the tasks of those that did not, flushes the pending
// settles and returns. A handler that ignores its context may still be
// running when Run returns; its result is dropped. A Worker runs once.
//
// Before it takes any task, Run stores WorkerConfig.Schedules; when one
// cannot be stored, Run returns that error without working.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("rdq: Worker.Run called twice")
	}
	if err := w.declareSchedules(ctx); err != nil {
		return err
	}
	w.settlers.Add(1)
	go w.settleLoop()
	// Handlers' contexts keep Run's values but not its cancellation: each is
	// cancelled on its own (a lost lease, the end of the grace period).
	base := context.WithoutCancel(ctx)
	w.registered = w.cfg.Registry.snapshot()
	w.untraced = ContextWithTraceParent(base, "")
	go w.leaseLoop()

	w.runs = make(chan *run, w.cfg.Concurrency+w.mostAhead())
	if w.adaptive() {
		go w.paceLoop(ctx)
	}
	for i := 0; i < w.cfg.Concurrency; i++ {
		go func() {
			for r := range w.runs {
				w.work(r)
			}
		}()
	}
	defer close(w.runs)
	if w.cfg.Transport == TransportHTTP || !w.streamLoop(ctx, base) {
		w.claimLoops(ctx, base)
	}
	// Tasks still waiting for a handler are handed back now, unrun.
	w.mu.Lock()
	for _, r := range w.running {
		if r.state == stateRunning && !r.began {
			r.state = stateReleased
			r.cancel(ErrShutdown)
			w.settleCh <- settleItem{Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: SettleRelease}, r.from}
		}
	}
	w.mu.Unlock()

	done := make(chan struct{})
	go func() { w.handlers.Wait(); close(done) }()
	timer := time.NewTimer(w.cfg.ShutdownGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
	w.mu.Lock()
	for _, r := range w.running {
		if r.state == stateRunning && !r.settledElsewhere {
			r.state = stateReleased
			r.cancel(ErrShutdown)
			w.settleCh <- settleItem{Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: SettleRelease}, r.from}
		}
	}
	w.closed = true
	close(w.settleCh)
	w.mu.Unlock()
	close(w.leaseStop)
	<-w.leaseDone
	w.extenders.Wait()
	w.settlers.Wait()
	w.acking.Wait()
	return nil
}

// declareSchedules stores the declared schedules (owner code), then
// records the code-owned schedules the server has that none of them names.
// Nothing is declared, nor listed, when the worker declares no schedule.
func (w *Worker) declareSchedules(ctx context.Context) error {
	if len(w.cfg.Schedules) == 0 {
		return nil
	}
	declared := make(map[string]bool, len(w.cfg.Schedules))
	for _, s := range w.cfg.Schedules {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, created, err := w.client.putSchedule(rctx, s, ScheduleOwnerCode)
		cancel()
		if err != nil {
			return fmt.Errorf("rdq: declaring schedule %s: %w", s.Name, err)
		}
		declared[s.Name] = true
		w.cfg.Logger.Debug("rdq: schedule declared", "schedule", s.Name, "created", created)
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	stored, err := w.client.ListSchedules(rctx)
	cancel()
	if err != nil {
		err = fmt.Errorf("rdq: listing schedules to find those no longer declared: %w", err)
		w.cfg.Logger.Warn(err.Error())
		w.report(err)
		return nil
	}
	gone := []string{}
	for _, st := range stored {
		if st.Owner == ScheduleOwnerCode && !declared[st.Name] {
			gone = append(gone, st.Name)
			w.cfg.Logger.Warn("rdq: a schedule put by code is declared no more; it still fires: delete it if it should stop",
				"schedule", st.Name, "hint", "rdq schedule delete "+st.Name)
		}
	}
	w.declMu.Lock()
	w.undeclared = gone
	w.declMu.Unlock()
	return nil
}

// UndeclaredSchedules answers the schedules put by code (by this program or
// another) that this worker does not declare, by name: they keep firing
// until deleted (`rdq schedule delete NAME`, or Client.DeleteSchedule).
// Only schedules the worker's token may read are seen. It is nil until Run
// has stored the worker's own schedules (and always when it declares
// none), then not nil, empty when every code-owned schedule is declared.
func (w *Worker) UndeclaredSchedules() []string {
	w.declMu.Lock()
	defer w.declMu.Unlock()
	return slices.Clone(w.undeclared)
}

// capacity is how many tasks the worker holds at once: its handler slots
// and the tasks prefetched for them.
func (w *Worker) capacity() int { return w.cfg.Concurrency + int(w.ahead.Load()) }

// start runs the handler of a claimed task whose slot is taken.
func (w *Worker) start(base context.Context, t ClaimedTask, from *workStream) {
	lease := w.leaseOf(t.Envelope)
	now := time.Now()
	r := &run{worker: w, task: t, from: from, lease: lease, interval: max(lease/3, 10*time.Millisecond), deadline: now.Add(lease)}
	r.ctx, r.cancel = context.WithCancelCause(context.WithValue(w.handlerContext(base, t.Envelope), runKey{}, r))
	r.next = now.Add(r.interval)
	w.mu.Lock()
	w.running[t.ID] = r
	wake := w.leaseWakeAt.IsZero() || r.next.Before(w.leaseWakeAt)
	if wake {
		w.leaseWakeAt = r.next
	}
	w.mu.Unlock()
	if wake {
		select {
		case w.leaseWake <- struct{}{}:
		default:
		}
	}
	w.handlers.Add(1) // its slot was reserved before the claim
	w.runs <- r
}

// handlerContext carries the task's trace context: its well-formed
// "traceparent" header, or none (hiding any traceparent Run's context
// carried), so submits from the handler continue the task's trace and a
// task without one never joins an unrelated trace.
func (w *Worker) handlerContext(base context.Context, task envelope.Envelope) context.Context {
	tp, ok := wellFormedTraceParent(task.Headers[TraceParentHeader])
	if !ok {
		return w.untraced
	}
	return ContextWithTraceParent(base, tp)
}

func (w *Worker) work(r *run) {
	w.mu.Lock()
	waited := r.state != stateRunning // released at shutdown, or its lease lost, while it waited
	r.began = true
	w.mu.Unlock()
	var outcome Outcome
	if !waited { // not released, lost or cancelled while it waited for a handler slot
		w.begun.Add(1)
		outcome = w.execute(r.ctx, r.task.Envelope)
		// A handler stopped by a cancel is a cancelled failure, unless it
		// succeeded all the same.
		if ce, cancelled := CancelRequested(r.ctx); cancelled && outcome.kind != kindSuccess {
			outcome = cancelledOutcome(ce)
		}
	}
	r.cancel(nil)
	s := Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: outcome.Settlement(), Error: outcome.settleError()}
	if outcome.kind == kindDefer {
		ms := outcome.delay.Milliseconds()
		s.DeferMs = &ms
		s.Error = nil
		s.Throttle = outcome.throttle
	}

	w.mu.Lock()
	r.finished = true // no further extension
	if pending := r.extending; pending != nil {
		w.mu.Unlock()
		<-pending // settle after the extension in flight, not alongside it
		w.mu.Lock()
	}
	// Not settled when released at shutdown, or when the lease was lost;
	// nor when the handler settled it itself, which gives the Work stream
	// its credit back all the same.
	credit := false
	if r.state == stateRunning {
		r.state = stateDone
		switch {
		case r.settledElsewhere:
			credit = r.from != nil
		case !w.closed:
			w.settleCh <- settleItem{s, r.from}
		}
	}
	if w.running[r.task.ID] == r { // the task may have been claimed again since its lease was lost
		delete(w.running, r.task.ID)
	}
	w.mu.Unlock()
	if credit {
		if ws := w.stream.Load(); ws != nil {
			_ = ws.credit(1)
		}
	}
	w.inflight.Add(-1)
	w.signalSlot()
	w.handlers.Done()
}

// execute runs the handler and resolves its outcome; panics in the handler
// or the mapper are retryable failures, never a dead worker.
func (w *Worker) execute(ctx context.Context, task envelope.Envelope) (out Outcome) {
	reg, ok := w.registered[task.HandlerRef]
	if !ok {
		return PermanentFailure(fmt.Errorf("no handler for %q on queue %q in this worker", task.HandlerRef, task.Queue)).
			WithType(NoHandlerErrorType)
	}
	if reg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, reg.timeout, &TimeoutError{Timeout: reg.timeout})
		defer cancel()
	}
	ret, err, panicked := call(ctx, reg.run, task)
	if panicked != nil {
		return RetryableFailure(panicked).WithType(PanicErrorType)
	}
	err = timedOut(ctx, err)
	mapper := reg.mapper
	if mapper == nil {
		mapper = w.cfg.OutcomeMapper
	}
	defer func() {
		if v := recover(); v != nil {
			out = RetryableFailure(&PanicError{Value: v, stack: string(debug.Stack())}).WithType(MapperPanicErrorType)
		}
	}()
	return Resolve(ret, err, mapper, w.cfg.Classifiers)
}

func call(ctx context.Context, h ResultHandler, task envelope.Envelope) (ret any, err error, panicked *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			panicked = &PanicError{Value: v, stack: string(debug.Stack())}
		}
	}()
	ret, err = h(ctx, task)
	return ret, err, nil
}
