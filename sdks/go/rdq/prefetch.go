package rdq

// How many claimed tasks a worker holds ready beyond its free handler
// slots (WorkerConfig.Prefetch). Tasks claimed ahead let one claim (or the
// stream's credits) feed many handlers, but each waits under its own lease
// and is held from every other worker while it waits; so by default the
// worker holds what its handlers start in prefetchWindow at the rate they
// have been starting tasks: hundreds for handlers that take microseconds,
// a few for handlers of 10 ms, none for a worker gone quiet, and none at
// all on a queue under flow control, where a task claimed ahead would hold
// a slot of the queue's limits while it waits (the same rule as the Rust
// worker's, docs/configuration.md).

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"
)

// NoPrefetch as WorkerConfig.Prefetch holds no task beyond the free
// handler slots.
const NoPrefetch = -1

const (
	// prefetchWindow is how much work, in time at the recent start rate,
	// an adaptive worker holds ahead.
	prefetchWindow = 50 * time.Millisecond
	// prefetchMax is the most tasks an adaptive worker holds ahead.
	prefetchMax = 1024
	// prefetchSample is how often the start rate is measured.
	prefetchSample = 20 * time.Millisecond
	// flowCheckEvery is how often the queues' policies are read again.
	flowCheckEvery = 5 * time.Second
)

// pace measures the rate handlers start tasks and what to hold ahead.
type pace struct {
	since       time.Time
	startedThen uint64
	rate        float64 // starts a second, smoothed over samples
}

// ahead is how many tasks to hold ready, given the handlers have started
// started tasks in all by now.
func (p *pace) ahead(started uint64, now time.Time) int {
	if elapsed := now.Sub(p.since); elapsed >= prefetchSample {
		sample := float64(started-p.startedThen) / elapsed.Seconds()
		// Half the last sample, half the history: a burst is seen within a
		// few samples, and a queue gone quiet drops to none.
		p.rate = (p.rate + sample) / 2
		p.since = now
		p.startedThen = started
	}
	ahead := p.rate * prefetchWindow.Seconds()
	if ahead < 1 {
		return 0
	}
	return min(int(ahead), prefetchMax)
}

// adaptive reports whether the worker sizes its prefetch itself.
func (w *Worker) adaptive() bool { return w.cfg.Prefetch == 0 }

// mostAhead is the most tasks the worker may ever hold beyond its handler
// slots, which sizes its buffers.
func (w *Worker) mostAhead() int {
	switch {
	case w.adaptive():
		return prefetchMax
	case w.cfg.Prefetch == NoPrefetch:
		return 0
	default:
		return w.cfg.Prefetch
	}
}

// paceLoop keeps an adaptive worker's prefetch (w.ahead) at its handlers'
// pace until ctx ends, and gives the Work stream the credits it grows by.
func (w *Worker) paceLoop(ctx context.Context) {
	var p pace
	p.since = time.Now()
	var limited atomic.Bool
	checked := make(chan struct{}, 1)
	go func() {
		for {
			limited.Store(w.anyFlowControlled(ctx))
			select {
			case checked <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(flowCheckEvery):
			}
		}
	}()
	// Until the policies are read, hold nothing ahead.
	select {
	case <-checked:
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(prefetchSample)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			ahead := p.ahead(w.begun.Load(), now)
			if limited.Load() {
				ahead = 0
			}
			w.ahead.Store(int64(ahead))
			w.growStreamCredits()
		}
	}
}

// anyFlowControlled reports whether any of the worker's queues has a flow
// section in its policy; a policy that cannot be read counts as one.
func (w *Worker) anyFlowControlled(ctx context.Context) bool {
	for _, q := range w.cfg.Queues {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		raw, err := w.client.QueueConfig(rctx, q)
		cancel()
		if err != nil {
			return true
		}
		var policy struct {
			Flow map[string]json.RawMessage `json:"flow"`
		}
		if json.Unmarshal(raw, &policy) != nil || len(policy.Flow) > 0 {
			return true
		}
	}
	return false
}

// growStreamCredits gives the open Work stream the credits the worker's
// capacity grew by since the stream last had them. Credits are never taken
// back: a stream keeps its highest level until it is opened again.
func (w *Worker) growStreamCredits() {
	s := w.stream.Load()
	if s == nil {
		return
	}
	capacity := int64(w.capacity())
	for {
		had := s.capacity.Load()
		if capacity <= had {
			return
		}
		if s.capacity.CompareAndSwap(had, capacity) {
			_ = s.credit(int(capacity - had))
			return
		}
	}
}
