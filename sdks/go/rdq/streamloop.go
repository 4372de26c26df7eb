package rdq

// Working on the Work stream: one stream at a time, opened with the free
// slots (handlers and prefetch) as its credits; the server pushes tasks while credits
// allow, and each settle on the stream gives its task's credit back. A
// stream that fails is opened again after PollInterval (tasks it handed out
// keep running, and settle on the next stream or over HTTP). At shutdown
// the stream is half-closed, so the server hands out nothing more, and
// what is still to be settled goes over HTTP.

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamLoop works on Work streams until ctx ends, and reports true. With
// TransportAuto it reports false, at once, when the server offers no gRPC:
// the caller then works over HTTP.
func (w *Worker) streamLoop(ctx, base context.Context) bool {
	for ctx.Err() == nil {
		free := w.capacity() - int(w.inflight.Load())
		if free <= 0 {
			select {
			case <-w.slotFree:
			case <-ctx.Done():
			}
			continue
		}
		s, err := w.client.openWorkStream(w.cfg.Queues, free, w.cfg.Lease, w.cfg.OnDeadLetter == nil)
		if err != nil {
			if w.cfg.Transport == TransportAuto && w.offersNoGRPC(ctx, err, false) {
				w.report(fmt.Errorf("rdq: the server offers no Work stream, working over HTTP: %w", err))
				return false
			}
			w.report(err)
			sleep(ctx, w.cfg.PollInterval)
			continue
		}
		s.capacity.Store(int64(w.capacity()))
		// Settles and extensions go on the stream from its first task on.
		w.stream.Store(s)
		s.start(func(s *workStream, t ClaimedTask, err error) { w.arrived(ctx, base, s, t, err) }, w.cancelRun)
		select {
		case <-ctx.Done():
			s.close(requestTimeout)
		case <-s.done:
			if s.err != nil && w.cfg.Transport == TransportAuto && w.offersNoGRPC(ctx, s.err, s.opened.Load()) {
				w.report(fmt.Errorf("rdq: the server offers no Work stream, working over HTTP: %w", s.err))
				return false
			}
			if s.err != nil {
				w.report(s.err)
			}
			sleep(ctx, w.cfg.PollInterval)
		}
	}
	return true
}

// arrived takes a task the stream handed out: it runs it, or, once Run's
// context has ended, hands it back unstarted (over HTTP: the stream is
// closed first, so the release gives no credit back for another task).
func (w *Worker) arrived(ctx, base context.Context, s *workStream, t ClaimedTask, err error) {
	if err != nil {
		w.report(fmt.Errorf("rdq: a task from the Work stream (%s): %w", t.ID, err))
		// Its lease lapses; the slot it held on the stream is free again.
		_ = s.credit(1)
		return
	}
	if ctx.Err() != nil {
		s.closeSend()
		w.mu.Lock()
		if !w.closed {
			w.settleCh <- settleItem{Settle{ID: t.ID, LeaseToken: t.LeaseToken, Outcome: SettleRelease}, s}
		}
		w.mu.Unlock()
		return
	}
	w.inflight.Add(1)
	w.start(base, t, s)
}

// offersNoGRPC reports whether a stream's failure says the server has no
// gRPC to offer: the RPC is UNIMPLEMENTED (a gRPC server without the
// service may answer headers first, so also once opened), or the stream
// failed before the server answered it, without an rdq code, while the
// server answers HTTP. A stream that was open and then broke is never
// taken for that.
func (w *Worker) offersNoGRPC(ctx context.Context, err error, opened bool) bool {
	var e *Error
	if errors.As(err, &e) {
		return false
	}
	if status.Code(errors.Unwrap(err)) == codes.Unimplemented {
		return true
	}
	return !opened && w.client.answersHTTP(ctx)
}

// answersHTTP reports whether the server answers an HTTP request at all.
func (c *Client) answersHTTP(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", c.ua)
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
