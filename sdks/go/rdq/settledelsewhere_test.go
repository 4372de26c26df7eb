package rdq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// A handler that says it settled its task elsewhere gets no settle from the
// worker, whatever it returns: its tasks stay IN_FLIGHT here, where nothing
// else settles them. One handler slot and three tasks: on the Work stream
// the later tasks come only if the credit came back without a settle.
func TestATaskSettledElsewhereGetsNoSettleFromTheWorker(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		const n = 3
		ids := map[string]bool{}
		for range n {
			ids[submit(t, c, rdq.Task{Queue: q, HandlerRef: "elsewhere"}).ID] = true
		}
		if _, ok := rdq.LeaseToken(context.Background()); ok {
			t.Fatal("a context outside a handler holds a lease token")
		}
		rdq.SettledElsewhere(context.Background()) // does nothing

		done := make(chan string, n)
		reg := rdq.NewRegistry()
		reg.Register("elsewhere", func(ctx context.Context, task envelope.Envelope) error {
			token, ok := rdq.LeaseToken(ctx)
			if !ok || token == "" {
				t.Errorf("task %s: no lease token in the handler's context", task.ID)
			}
			rdq.SettledElsewhere(ctx)
			done <- task.ID
			return errors.New("ignored: the task was settled elsewhere")
		})
		var mu sync.Mutex
		var reported []error
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{
			Transport: tr, Queues: []string{q}, Registry: reg, Concurrency: 1, PollInterval: 20 * time.Millisecond,
			OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		timeout := time.After(30 * time.Second)
		for range n {
			select {
			case id := <-done:
				if !ids[id] {
					t.Errorf("ran %s, not one of this test's tasks", id)
				}
			case <-timeout:
				stop()
				t.Fatal("not every task ran within 30 s")
			}
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		for id := range ids {
			env, err := c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if env.Status != envelope.StatusInFlight {
				t.Errorf("task %s is %s: the worker settled it", id, env.Status)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, err := range reported {
			t.Errorf("reported: %v", err)
		}
	})
}
