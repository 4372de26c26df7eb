package rdq

// Settling: outcomes gather into batches (a claim's worth, or what came
// within SettleLinger) and go out as one WorkSettle on the Work stream, or
// one POST /v1/settle.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"rdq.dev/sdk/go/envelope"
)

func (w *Worker) settleLoop() {
	defer w.settlers.Done()
	batches := make(chan []settleItem)
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
	var batch []settleItem
	ready := false
	for in != nil || len(batch) > 0 {
		var recv <-chan settleItem
		if len(batch) < w.cfg.SettleBatch {
			recv = in
		}
		var fired <-chan time.Time
		var out chan<- []settleItem
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
			batch = append(batch, item)
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

// flush sends one batch: on the Work stream while it takes messages (the
// results are read when the ack comes), otherwise over HTTP.
func (w *Worker) flush(items []settleItem) {
	batch := make([]Settle, len(items))
	for i, it := range items {
		batch[i] = it.settle
	}
	s := w.stream.Load()
	if s == nil {
		w.flushHTTP(batch)
		return
	}
	w.acking.Add(1)
	err := s.settle(batch, func(results []SettleResult, err error) {
		defer w.acking.Done()
		if err != nil {
			// The stream ended before the ack: the settles may or may not
			// be stored, and sending them again is harmless (one already
			// stored is refused, and reported).
			w.flushHTTP(batch)
			return
		}
		w.settled(results)
	})
	if err != nil {
		w.acking.Done()
		w.flushHTTP(batch)
		return
	}
	// A settle on the stream gives back the credits of the tasks the
	// stream handed out; tasks of an earlier stream free their slot too.
	earlier := 0
	for _, it := range items {
		if it.from != nil && it.from != s {
			earlier++
		}
	}
	if earlier > 0 {
		_ = s.credit(earlier)
	}
}

// flushHTTP sends one batch with POST /v1/settle, retrying transport
// failures a few times: an outcome not reported lets the lease lapse and the
// task run again.
func (w *Worker) flushHTTP(batch []Settle) {
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
	w.settled(results)
}

// settled reports refused settles and calls OnDeadLetter for dead tasks.
func (w *Worker) settled(results []SettleResult) {
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
