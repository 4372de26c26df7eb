package rdq

// Lease keeping: one keeper per Worker extends the leases of all running
// handlers, a third of each lease after the last extension, on the Work
// stream while it is open and over HTTP otherwise.

import (
	"context"
	"fmt"
	"time"

	"rdq.dev/sdk/go/envelope"
)

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
// An extension answered with a cancel request cancels the handler's context
// with a *CancelledError.
// It runs until Run stops it, after the last handler is done or released.
func (w *Worker) leaseLoop() {
	defer close(w.leaseDone)
	for {
		now := time.Now()
		var earliest time.Time
		w.mu.Lock()
		for _, r := range w.running {
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
	var res SettleResult
	err := errStreamClosed
	if s := w.stream.Load(); s != nil {
		res, err = s.extend(ectx, r.task.ID, r.task.LeaseToken, r.lease)
	}
	if err == errStreamClosed {
		res = SettleResult{ID: r.task.ID}
		res.Envelope, err = w.client.ExtendLease(ectx, r.task.ID, r.task.LeaseToken, r.lease)
	}
	// The answer says a cancel was asked of the task: its handler is stopped.
	var ce *CancelledError
	if err == nil {
		ce = w.cancelOfExtension(ectx, r, res)
	}
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
	if ce != nil {
		w.cancelLocked(r, ce)
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
