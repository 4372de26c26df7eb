package rdq

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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

// WorkerConfig configures a Worker. Queues and Registry are required.
type WorkerConfig struct {
	// Queues to claim from, in turn.
	Queues   []string
	Registry *Registry
	// Concurrency is how many handlers run at once (default 64).
	Concurrency int
	// ClaimBatch is the most tasks one claim asks for (default 64, at most 1000).
	ClaimBatch int
	// SettleBatch is the most outcomes one POST /v1/settle carries (default 512, at most 1000).
	SettleBatch int
	// ClaimConcurrency is how many claims may be in flight at once (default
	// 2), so one claim's round trip overlaps another's; free handler slots
	// are reserved before each claim, so together they never claim more than
	// Concurrency allows.
	ClaimConcurrency int
	// PollInterval is the wait after a round of claims found nothing (default 200 ms).
	PollInterval time.Duration
	// SettleLinger is how long an outcome may wait for others to share its
	// POST /v1/settle, until a claim's worth (ClaimBatch, at most
	// Concurrency) has gathered
	// (default 1 ms; negative: send what is there at once). Fewer, larger
	// settles cost the server less per task; handler slots are freed when
	// the handler returns, not when its outcome is sent.
	SettleLinger time.Duration
	// ClaimLinger is how long a claim may wait for more handler slots to
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
	// extensions. Default: ignored.
	OnError func(err error)
}

// Worker runs handlers for claimed tasks. Make one with NewWorker and call Run.
type Worker struct {
	client *Client
	cfg    WorkerConfig

	started  atomic.Bool
	inflight atomic.Int64
	slotFree chan struct{}

	mu       sync.Mutex // guards running, closed and every task's state change
	running  map[*run]struct{}
	closed   bool
	settleCh chan settleItem

	handlers sync.WaitGroup
	settlers sync.WaitGroup

	// One lease keeper per Worker (leaseLoop) extends the leases of all
	// running handlers, instead of a goroutine and a ticker per handler.
	leaseWake   chan struct{} // wakes the keeper early: a run is due sooner than it planned
	leaseWakeAt time.Time     // the keeper's planned wake-up; zero when it waits for a run (guarded by mu)
	leaseStop   chan struct{}
	leaseDone   chan struct{}
	extenders   sync.WaitGroup // extension requests in flight
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
	task   ClaimedTask
	cancel context.CancelCauseFunc
	state  runState // guarded by Worker.mu

	// Lease keeping, all guarded by Worker.mu: the lease length and the
	// extension interval (a third of it), when the lease ends as far as this
	// worker knows, when the next extension is due, whether the handler has
	// returned, and the extension in flight (closed when it ends; nil when none).
	lease, interval time.Duration
	deadline, next  time.Time
	finished        bool
	extending       chan struct{}
}

type settleItem struct {
	settle Settle
}

// NewWorker checks cfg and makes a Worker.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("rdq: NewWorker needs a client")
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
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
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
	return &Worker{
		client:    client,
		cfg:       cfg,
		slotFree:  make(chan struct{}, 1),
		running:   map[*run]struct{}{},
		settleCh:  make(chan settleItem, 2*cfg.Concurrency+cfg.SettleBatch),
		leaseWake: make(chan struct{}, 1),
		leaseStop: make(chan struct{}),
		leaseDone: make(chan struct{}),
	}, nil
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
// gracefully: it stops claiming, gives running handlers ShutdownGrace to
// finish, hands back (RELEASE) the tasks of those that did not, flushes the
// pending settles and returns. A handler that ignores its context may still
// be running when Run returns; its result is dropped. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("rdq: Worker.Run called twice")
	}
	w.settlers.Add(1)
	go w.settleLoop()
	base, cancelAll := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelAll(ErrShutdown)
	go w.leaseLoop()

	var claimers sync.WaitGroup
	for i := 0; i < w.cfg.ClaimConcurrency; i++ {
		claimers.Add(1)
		go func(first int) {
			defer claimers.Done()
			w.claimLoop(ctx, base, first)
		}(i)
	}
	claimers.Wait()

	done := make(chan struct{})
	go func() { w.handlers.Wait(); close(done) }()
	timer := time.NewTimer(w.cfg.ShutdownGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
	w.mu.Lock()
	for r := range w.running {
		if r.state == stateRunning {
			r.state = stateReleased
			r.cancel(ErrShutdown)
			w.settleCh <- settleItem{Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: SettleRelease}}
		}
	}
	w.closed = true
	close(w.settleCh)
	w.mu.Unlock()
	close(w.leaseStop)
	<-w.leaseDone
	w.extenders.Wait()
	w.settlers.Wait()
	return nil
}

// reserve takes up to ClaimBatch free handler slots for one claim.
func (w *Worker) reserve() int64 {
	for {
		cur := w.inflight.Load()
		free := int64(w.cfg.Concurrency) - cur
		if free <= 0 {
			return 0
		}
		want := min(free, int64(w.cfg.ClaimBatch))
		if w.inflight.CompareAndSwap(cur, cur+want) {
			return want
		}
	}
}

// release gives back n reserved slots a claim did not fill.
func (w *Worker) release(n int64) {
	if n > 0 {
		w.inflight.Add(-n)
		w.signalSlot()
	}
}

func (w *Worker) signalSlot() {
	select {
	case w.slotFree <- struct{}{}:
	default:
	}
}

// gather waits, up to ClaimLinger, until a claim's worth of handler
// slots is free, so that claims stay large when handlers are quick.
func (w *Worker) gather(ctx context.Context, linger *time.Timer) {
	enough := int64(max(1, min(w.cfg.ClaimBatch, w.cfg.Concurrency)))
	free := func() int64 { return int64(w.cfg.Concurrency) - w.inflight.Load() }
	if w.cfg.ClaimLinger <= 0 || free() <= 0 || free() >= enough {
		return
	}
	linger.Reset(w.cfg.ClaimLinger)
	defer stopTimer(linger)
	for free() < enough {
		select {
		case <-w.slotFree:
		case <-linger.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (w *Worker) claimLoop(ctx, base context.Context, next int) {
	empty := 0
	linger := time.NewTimer(time.Hour)
	stopTimer(linger)
	for ctx.Err() == nil {
		w.gather(ctx, linger)
		want := w.reserve()
		if want == 0 {
			t := time.NewTimer(w.cfg.PollInterval)
			select {
			case <-w.slotFree:
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		queue := w.cfg.Queues[next%len(w.cfg.Queues)]
		next++
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		tasks, err := w.client.Claim(cctx, queue, int(want), w.cfg.Lease)
		cancel()
		w.release(want - int64(len(tasks)))
		if err != nil {
			w.report(fmt.Errorf("rdq: claiming from %s: %w", queue, err))
			empty = len(w.cfg.Queues)
		}
		if len(tasks) == 0 {
			empty++
			if empty >= len(w.cfg.Queues) {
				empty = 0
				sleep(ctx, w.cfg.PollInterval)
			}
			continue
		}
		empty = 0
		for _, t := range tasks {
			w.start(base, t)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (w *Worker) start(base context.Context, t ClaimedTask) {
	hctx, cancel := context.WithCancelCause(handlerContext(base, t.Envelope))
	lease := w.leaseOf(t.Envelope)
	now := time.Now()
	r := &run{task: t, cancel: cancel, lease: lease, interval: max(lease/3, 10*time.Millisecond), deadline: now.Add(lease)}
	r.next = now.Add(r.interval)
	w.mu.Lock()
	w.running[r] = struct{}{}
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
	go w.work(hctx, r)
}

// handlerContext carries the task's trace context: its well-formed
// "traceparent" header, or none (hiding any traceparent Run's context
// carried), so submits from the handler continue the task's trace and a
// task without one never joins an unrelated trace.
func handlerContext(base context.Context, task envelope.Envelope) context.Context {
	tp, _ := wellFormedTraceParent(task.Headers[TraceParentHeader])
	return ContextWithTraceParent(base, tp)
}

func (w *Worker) work(ctx context.Context, r *run) {
	defer func() {
		r.cancel(nil)
		w.mu.Lock()
		delete(w.running, r)
		w.mu.Unlock()
		w.inflight.Add(-1)
		w.signalSlot()
		w.handlers.Done()
	}()

	outcome := w.execute(ctx, r.task.Envelope)
	w.mu.Lock()
	r.finished = true // no further extension
	pending := r.extending
	w.mu.Unlock()
	if pending != nil {
		<-pending // settle after the extension in flight, not alongside it
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if r.state != stateRunning {
		return // released at shutdown, or the lease was lost
	}
	r.state = stateDone
	s := Settle{ID: r.task.ID, LeaseToken: r.task.LeaseToken, Outcome: outcome.Settlement(), Error: outcome.settleError()}
	if outcome.kind == kindDefer {
		ms := outcome.delay.Milliseconds()
		s.DeferMs = &ms
		s.Error = nil
		s.Throttle = outcome.throttle
	}
	if !w.closed {
		w.settleCh <- settleItem{s}
	}
}

// execute runs the handler and resolves its outcome; panics in the handler
// or the mapper are retryable failures, never a dead worker.
func (w *Worker) execute(ctx context.Context, task envelope.Envelope) (out Outcome) {
	reg, ok := w.cfg.Registry.lookup(task.HandlerRef)
	if !ok {
		return PermanentFailure(fmt.Errorf("no handler for %q on queue %q in this worker", task.HandlerRef, task.Queue)).
			WithType(NoHandlerErrorType)
	}
	ret, err, panicked := call(ctx, reg.run, task)
	if panicked != nil {
		return RetryableFailure(panicked).WithType(PanicErrorType)
	}
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

// leaseOf is the claim's lease length, measured on the server's clock
// (lease end minus the open attempt's start) so clock skew does not matter.
func (w *Worker) leaseOf(env envelope.Envelope) time.Duration {
	if env.LeaseExpiresAt != nil && len(env.Attempts) > 0 {
		if d := env.LeaseExpiresAt.Sub(env.Attempts[len(env.Attempts)-1].StartedAt); d > 0 {
			return d
		}
	}
	if w.cfg.Lease > 0 {
		return w.cfg.Lease
	}
	return 30 * time.Second
}

// leaseLoop keeps the leases of the running handlers: it sleeps until the
// earliest extension is due, extends every lease due by then (each a third of
// its length after the last), and sleeps again. A lease the server answers
// LEASE_LOST for, or that ends locally without a successful extension, has
// its handler's context cancelled with ErrLeaseLost; the result is dropped.
// It runs until Run stops it, after the last handler is done or released.
func (w *Worker) leaseLoop() {
	defer close(w.leaseDone)
	for {
		now := time.Now()
		var earliest time.Time
		w.mu.Lock()
		for r := range w.running {
			if r.state != stateRunning || r.finished {
				continue
			}
			if !r.next.After(now) {
				r.next = now.Add(r.interval)
				if r.extending == nil { // one still in flight skips this turn
					r.extending = make(chan struct{})
					w.extenders.Add(1)
					go w.extend(r, r.deadline, r.extending)
				}
			}
			if earliest.IsZero() || r.next.Before(earliest) {
				earliest = r.next
			}
		}
		w.leaseWakeAt = earliest
		w.mu.Unlock()

		var timer *time.Timer
		var timeout <-chan time.Time
		if !earliest.IsZero() {
			timer = time.NewTimer(earliest.Sub(now))
			timeout = timer.C
		}
		stop := false
		select {
		case <-w.leaseStop:
			stop = true
		case <-w.leaseWake:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
		if stop {
			return
		}
	}
}

// extend makes one extension of r's lease, then marks it ended (done). The
// request may take until the lease ends as this worker knows it (deadline),
// not just one interval: a server slower than the interval but answering
// within the lease keeps the lease.
func (w *Worker) extend(r *run, deadline time.Time, done chan struct{}) {
	defer w.extenders.Done()
	ectx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(r.interval)))
	_, err := w.client.ExtendLease(ectx, r.task.ID, r.task.LeaseToken, r.lease)
	cancel()

	w.mu.Lock()
	lost, report := false, false
	switch {
	case err == nil:
		r.deadline = time.Now().Add(r.lease)
	case IsCode(err, CodeLeaseLost) || IsCode(err, CodeTaskNotFound) || IsCode(err, CodeInvalidTransition):
		lost = true
	case time.Now().Before(r.deadline.Add(-r.interval / 2)):
		report = true
	default:
		lost, report = true, true
	}
	if lost && r.state == stateRunning {
		r.state = stateLost
		r.cancel(ErrLeaseLost)
	}
	r.extending = nil
	close(done)
	w.mu.Unlock()
	if report {
		w.report(fmt.Errorf("rdq: extending the lease of %s: %w", r.task.ID, err))
	}
}

// later is the later of two instants.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (w *Worker) settleLoop() {
	defer w.settlers.Done()
	batches := make(chan []Settle)
	var flushers sync.WaitGroup
	for i := 0; i < settlers; i++ {
		flushers.Add(1)
		go func() {
			defer flushers.Done()
			for batch := range batches {
				w.flush(batch)
			}
		}()
	}
	// A batch may go once it holds a claim's worth, has lingered, or the
	// input closed; while every flusher is busy it keeps growing.
	enough := min(w.cfg.ClaimBatch, w.cfg.Concurrency, w.cfg.SettleBatch)
	linger := time.NewTimer(time.Hour)
	stopTimer(linger)
	in := w.settleCh
	var batch []Settle
	ready := false
	for in != nil || len(batch) > 0 {
		var recv <-chan settleItem
		if len(batch) < w.cfg.SettleBatch {
			recv = in
		}
		var fired <-chan time.Time
		var out chan<- []Settle
		if len(batch) > 0 {
			if ready {
				out = batches
			} else {
				fired = linger.C
			}
		}
		select {
		case item, ok := <-recv:
			if !ok {
				in = nil
				if !ready {
					stopTimer(linger)
					ready = true
				}
				continue
			}
			if len(batch) == 0 {
				if w.cfg.SettleLinger > 0 {
					linger.Reset(w.cfg.SettleLinger)
				} else {
					ready = true
				}
			}
			batch = append(batch, item.settle)
			if !ready && len(batch) >= enough {
				stopTimer(linger)
				ready = true
			}
		case <-fired:
			ready = true
		case out <- batch:
			batch = nil
			ready = false
		}
	}
	close(batches)
	flushers.Wait()
}

// stopTimer stops t and drains a value it already sent, so that Reset
// starts afresh (timers before Go 1.23 keep a fired value).
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

// flush sends one batch, retrying transport failures a few times: an
// outcome not reported lets the lease lapse and the task run again.
func (w *Worker) flush(batch []Settle) {
	var results []SettleResult
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		results, err = w.client.settleBatch(ctx, batch, w.cfg.OnDeadLetter != nil)
		cancel()
		var e *Error
		if err == nil || errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
			break
		}
	}
	if err != nil {
		w.report(fmt.Errorf("rdq: settling %d tasks: %w", len(batch), err))
		return
	}
	for _, r := range results {
		if r.Err != nil {
			w.report(fmt.Errorf("rdq: settling %s: %w", r.ID, r.Err))
			continue
		}
		if r.Envelope.Status == envelope.StatusDead && w.cfg.OnDeadLetter != nil {
			w.cfg.OnDeadLetter(context.Background(), r.Envelope)
		}
	}
}
