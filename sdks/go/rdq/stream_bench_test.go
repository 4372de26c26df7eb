package rdq_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

// creditedWorkers hands out one prepared task whenever the worker has a
// credit, as the server does, and acks every settle: the worker's own cost
// per task on the Work stream, without a store behind it.
type creditedWorkers struct {
	rdqpb.UnimplementedWorkersServer
	task    *rdqpb.LeasedTask
	settled atomic.Int64
	total   int64
	done    chan struct{} // closed once total tasks are settled
	once    sync.Once
}

func (f *creditedWorkers) Work(stream rdqpb.Workers_WorkServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	credits := make(chan int, 1024)
	credits <- int(req.GetHello().GetCredits())
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				close(credits)
				return
			}
			if s := req.GetSettle(); s != nil {
				ack := &rdqpb.WorkAck{Seq: s.GetSeq()}
				_ = stream.Send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Ack{Ack: ack}})
				credits <- len(s.GetSettles())
				if f.settled.Add(int64(len(s.GetSettles()))) >= f.total {
					f.once.Do(func() { close(f.done) })
				}
			}
		}
	}()
	msg := &rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: f.task}}
	sent := int64(0)
	for n := range credits {
		for i := 0; i < n && sent < f.total; i++ {
			if err := stream.Send(msg); err != nil {
				return nil
			}
			sent++
		}
	}
	return nil
}

func BenchmarkAWorkerOnTheWorkStream(b *testing.B) {
	fake := &creditedWorkers{task: leasedTask("noop", []byte(`{"order_id":12345,"customer":"cus_0123456789abcdef"}`)),
		done: make(chan struct{}), total: int64(b.N)}
	url := serveFake(b, fake)
	c, err := rdq.NewClient(rdq.ClientConfig{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	reg := rdq.NewRegistry()
	reg.Register("noop", func(ctx context.Context, task envelope.Envelope) error { return nil })
	w, err := rdq.NewWorker(c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg, Concurrency: 128})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { done <- w.Run(ctx) }()
	<-fake.done
	b.StopTimer()
	stop()
	<-done
}
