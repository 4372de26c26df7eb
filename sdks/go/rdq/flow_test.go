package rdq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// A handler that returns rdq.Throttle holds its flow key back on the server:
// the flow status shows the key throttled until the deferral is due, a task
// of another key runs meanwhile, and no task of the throttled key starts
// before that time.
func TestAThrottleHoldsBackItsFlowKeyUntilTheDeferralIsDue(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"flow": map[string]any{"key_concurrency": 8}})
		const hold = 1500 * time.Millisecond

		var mu sync.Mutex
		started := map[string]time.Time{}
		calls := map[string]int{}
		reg := rdq.NewRegistry()
		reg.Register("push-back", func(ctx context.Context, task envelope.Envelope) error {
			mu.Lock()
			calls[task.ID]++
			first := calls[task.ID] == 1
			mu.Unlock()
			if first {
				return rdq.Throttle(hold)
			}
			return nil
		})
		reg.Register("record", func(ctx context.Context, task envelope.Envelope) error {
			mu.Lock()
			started[task.ID] = time.Now()
			mu.Unlock()
			return nil
		})
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, Concurrency: 4, PollInterval: 20 * time.Millisecond})

		first := submit(t, c, rdq.Task{Queue: q, HandlerRef: "push-back", FlowKey: "upstream-a"})
		waitFor(t, c, first.ID, "deferred", func(e envelope.Envelope) bool { return e.DeferralCount == 1 })
		// The settle stores the deferral, then the throttle: poll for it.
		flow := waitForFlow(t, c, q, func(f rdq.QueueFlow) bool { return blockedUntil(f, "upstream-a") != nil })
		until := *blockedUntil(flow, "upstream-a")
		if flow.BlockedUntil != nil {
			t.Fatalf("the queue is throttled, not the key alone: %+v", flow)
		}

		same := submit(t, c, rdq.Task{Queue: q, HandlerRef: "record", FlowKey: "upstream-a"})
		other := submit(t, c, rdq.Task{Queue: q, HandlerRef: "record", FlowKey: "upstream-b"})
		waitFor(t, c, other.ID, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		waitFor(t, c, same.ID, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		waitFor(t, c, first.ID, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		mu.Lock()
		defer mu.Unlock()
		if started[same.ID].Before(until) {
			t.Fatalf("a task of the throttled key started at %v, before the throttle's end %v", started[same.ID], until)
		}
		if !started[other.ID].Before(until) {
			t.Fatalf("the other key waited for the throttle: started %v, throttle ended %v", started[other.ID], until)
		}
	})
}

// rdq.ThrottleQueue and Client.Throttle hold the whole queue; a bad flow key
// is refused before any request.
func TestAQueueThrottleAndItsRefusals(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		ctx := context.Background()
		configure(t, c, q, map[string]any{"flow": map[string]any{"concurrency": 8}})
		if _, err := c.Throttle(ctx, q, "bad key", time.Second); !rdq.IsCode(err, "INVALID_FIELD") {
			t.Fatalf("a bad flow key: %v", err)
		}
		reg := rdq.NewRegistry()
		var once sync.Once
		reg.Register("stop-all", func(ctx context.Context, task envelope.Envelope) error {
			var err error
			once.Do(func() { err = rdq.ThrottleQueue(time.Minute) })
			return err
		})
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		first := submit(t, c, rdq.Task{Queue: q, HandlerRef: "stop-all", FlowKey: "k"})
		waitFor(t, c, first.ID, "deferred", func(e envelope.Envelope) bool { return e.DeferralCount == 1 })
		flow := waitForFlow(t, c, q, func(f rdq.QueueFlow) bool { return f.BlockedUntil != nil })
		if time.Until(*flow.BlockedUntil) < 30*time.Second {
			t.Fatalf("the queue is not throttled for a minute: %+v", flow)
		}
		flow, err := c.Throttle(ctx, q, "k", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(flow.Keys) != 1 || flow.Keys[0].Key != "k" || flow.Keys[0].BlockedUntil == nil {
			t.Fatalf("the key throttle is not shown: %+v", flow)
		}
		until := time.Now().Add(5 * time.Minute).Truncate(time.Millisecond)
		flow, err = c.ThrottleUntil(ctx, q, "k2", until)
		if err != nil {
			t.Fatal(err)
		}
		if b := blockedUntil(flow, "k2"); b == nil || !b.Equal(until) {
			t.Fatalf("the key k2 is not throttled until %v: %+v", until, flow)
		}
		if _, err := c.ThrottleUntil(ctx, q, "k2", time.Now().Add(-time.Minute)); !rdq.IsCode(err, "INVALID_FIELD") {
			t.Fatalf("a time in the past: %v", err)
		}
	})
}

// waitForFlow polls the queue's flow status until done says so, or fails
// after 30 seconds.
func waitForFlow(t *testing.T, c *rdq.Client, queue string, done func(rdq.QueueFlow) bool) rdq.QueueFlow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		flow, err := c.QueueFlow(context.Background(), queue)
		if err == nil && done(flow) {
			return flow
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flow status never showed the throttle (last error %v): %+v", err, flow)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func blockedUntil(f rdq.QueueFlow, key string) *time.Time {
	for _, k := range f.Keys {
		if k.Key == key {
			return k.BlockedUntil
		}
	}
	return nil
}
