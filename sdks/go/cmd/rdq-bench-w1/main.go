// Command rdq-bench-w1 runs benchmark W1 through the Go SDK against a
// running `rdq serve`: N no-op tasks with a ~100-byte JSON payload submitted
// one at a time with 64 submits in flight, then worked by one Worker with 64
// handlers. It prints one JSON line with submits/s and worked/s. Work ends
// when the server counts every task SUCCEEDED (settles answered), not when
// the last handler returns. -transport grpc works on the Work stream (each
// Worker's -concurrency is its stream's credits), -transport http polls.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7480", "rdq serve URL")
	queue := flag.String("queue", fmt.Sprintf("bench-w1-%d", time.Now().UnixNano()), "queue (fresh by default)")
	jobs := flag.Int("jobs", 20000, "tasks")
	inflight := flag.Int("inflight", 64, "submits in flight")
	concurrency := flag.Int("concurrency", 64, "worker handlers")
	prefetch := flag.Int("prefetch", 0, "WorkerConfig.Prefetch: tasks held ready beyond the free handlers")
	claimBatch := flag.Int("claim-batch", 64, "most tasks per claim")
	workers := flag.Int("workers", 1, "Worker instances, each with -concurrency handlers")
	claimers := flag.Int("claimers", 2, "claims in flight per Worker (ClaimConcurrency)")
	skipSubmit := flag.Bool("work-only", false, "only work tasks already submitted to -queue")
	claimLinger := flag.Duration("claim-linger", 0, "WorkerConfig.ClaimLinger (0: the default; negative: none)")
	settleLinger := flag.Duration("settle-linger", 0, "WorkerConfig.SettleLinger (0: the default; negative: none)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the work phase here")
	memProfile := flag.String("memprofile", "", "write a heap profile (allocations since start) here at the end")
	transportName := flag.String("transport", "grpc", "grpc (the Work stream), http (polling) or auto")
	pausedStart := flag.Bool("paused-start", false, "submit to a paused queue, start the Workers, and time from resuming it (as rdq bench --workload pull does)")
	flag.Parse()
	transport, ok := map[string]rdq.Transport{"grpc": rdq.TransportGRPC, "http": rdq.TransportHTTP, "auto": rdq.TransportAuto}[*transportName]
	if !ok {
		log.Fatalf("-transport %q: grpc, http or auto", *transportName)
	}
	ctx := context.Background()
	// Settles sent on Work streams, and the settles they carried.
	var settleMessages, settleItems atomic.Int64
	countSettles := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &countedStream{ClientStream: s, messages: &settleMessages, items: &settleItems}, err
	}
	c, err := rdq.NewClient(rdq.ClientConfig{URL: *url, GRPCDialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(countSettles)}})
	if err != nil {
		log.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"order_id": 12345, "customer": "cus_0123456789abcdef", "note": strings.Repeat("x", 40)})

	if *pausedStart {
		if _, err := c.SetQueueConfig(ctx, *queue, map[string]any{"paused": true}); err != nil {
			log.Fatal(err)
		}
	}
	var submitRate float64
	if !*skipSubmit {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < *inflight; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(*jobs) {
					if _, err := c.Submit(ctx, rdq.Task{Queue: *queue, HandlerRef: "noop", Payload: payload, ContentType: "application/json"}); err != nil {
						log.Fatal(err)
					}
				}
			}()
		}
		wg.Wait()
		submitRate = float64(*jobs) / time.Since(start).Seconds()
	}

	var handled atomic.Int64
	allHandled := make(chan struct{})
	reg := rdq.NewRegistry()
	reg.Register("noop", func(ctx context.Context, task envelope.Envelope) error {
		if handled.Add(1) == int64(*jobs) {
			close(allHandled)
		}
		return nil
	})
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	wctx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	cpuBefore := cpuTime()
	start := time.Now()
	for i := 0; i < *workers; i++ {
		// Each Worker has a client, so a connection, of its own, as
		// separate processes would (and as rdq bench's workers do).
		wc, err := rdq.NewClient(rdq.ClientConfig{URL: *url, GRPCDialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(countSettles)}})
		if err != nil {
			log.Fatal(err)
		}
		defer wc.Close()
		w, err := rdq.NewWorker(wc, rdq.WorkerConfig{Transport: transport, Queues: []string{*queue}, Registry: reg, Concurrency: *concurrency, Prefetch: *prefetch,
			ClaimBatch: *claimBatch, ClaimConcurrency: *claimers, PollInterval: 20 * time.Millisecond,
			ClaimLinger: *claimLinger, SettleLinger: *settleLinger,
			OnError: func(err error) { log.Print(err) }})
		if err != nil {
			log.Fatal(err)
		}
		running.Add(1)
		go func() { defer running.Done(); _ = w.Run(wctx) }()
	}
	if *pausedStart {
		// Timed from resuming the queue, once the Workers have opened their
		// streams: what rdq bench --workload pull measures.
		time.Sleep(300 * time.Millisecond)
		cpuBefore, start = cpuTime(), time.Now()
		if _, err := c.SetQueueConfig(ctx, *queue, map[string]any{"paused": false}); err != nil {
			log.Fatal(err)
		}
	}
	select {
	case <-allHandled:
	case <-time.After(10 * time.Minute):
		log.Fatalf("stalled after %d tasks", handled.Load())
	}
	for {
		qs, err := c.Queues(ctx)
		if err != nil {
			log.Fatal(err)
		}
		var succeeded int64
		for _, q := range qs {
			if q.Queue == *queue {
				succeeded = q.Succeeded
			}
		}
		if succeeded >= int64(*jobs) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	workRate := float64(*jobs) / time.Since(start).Seconds()
	workCPU := cpuTime() - cpuBefore
	stop()
	running.Wait()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
	out, _ := json.Marshal(map[string]any{
		"system": "rdq-go-sdk", "transport": transport.String(), "jobs": *jobs, "payload_bytes": len(payload),
		"submits_per_s": submitRate, "worked_per_s": workRate,
		"stream_settles": settleMessages.Load(), "stream_settled": settleItems.Load(),
		"work_cpu_us_per_task": float64(workCPU.Microseconds()) / float64(*jobs),
	})
	fmt.Println(string(out))
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countedStream counts the WorkSettle messages a Work stream sends.
type countedStream struct {
	grpc.ClientStream
	messages, items *atomic.Int64
}

func (s *countedStream) SendMsg(m any) error {
	if req, ok := m.(*rdqpb.WorkRequest); ok && req.GetSettle() != nil {
		s.messages.Add(1)
		s.items.Add(int64(len(req.GetSettle().GetSettles())))
	}
	return s.ClientStream.SendMsg(m)
}
