package rdq

// Claiming over HTTP: a few claim loops, each asking for the free handler
// slots (at most ClaimBatch) of the queues in turn, with POST
// /v1/queues/{q}/claim, and sleeping PollInterval after a round found
// nothing. The Work stream (streamloop.go) needs none of this: the server
// pushes tasks while the worker has credits.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// claimLoops claims over HTTP with ClaimConcurrency loops until ctx ends.
func (w *Worker) claimLoops(ctx, base context.Context) {
	var claimers sync.WaitGroup
	for i := 0; i < w.cfg.ClaimConcurrency; i++ {
		claimers.Add(1)
		go func(first int) {
			defer claimers.Done()
			w.claimLoop(ctx, base, first)
		}(i)
	}
	claimers.Wait()
}

// reserve takes up to ClaimBatch free handler slots for one claim.
func (w *Worker) reserve() int64 {
	for {
		cur := w.inflight.Load()
		free := int64(w.capacity()) - cur
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
	free := func() int64 { return int64(w.capacity()) - w.inflight.Load() }
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
			w.start(base, t, nil)
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
