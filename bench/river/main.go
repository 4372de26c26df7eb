// Command river-w1 runs benchmark W1 on River (github.com/riverqueue/river):
// N no-op jobs with a ~100-byte JSON payload inserted one at a time with 64
// inserts in flight, then worked by a client with 64 workers. It prints one
// JSON line with submits/s and worked/s. A job counts as worked when River
// reports it completed (EventKindJobCompleted, sent after the completion is
// written), as the rdq program counts a task when its settle is answered.
//
// With -workload txinsert it runs the transactional-insert benchmark
// instead (txinsert.go), on River or on rdq (-system).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type NoopArgs struct {
	OrderID  int    `json:"order_id"`
	Customer string `json:"customer"`
	Note     string `json:"note"`
}

func (NoopArgs) Kind() string { return "noop" }

type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (w *NoopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error { return nil }

func main() {
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	schema := flag.String("schema", "river_bench", "schema to create, use and drop")
	jobs := flag.Int("jobs", 20000, "jobs")
	inflight := flag.Int("inflight", 64, "inserts in flight")
	workers := flag.Int("workers", 64, "River MaxWorkers")
	// River fetches at most MaxWorkers jobs per fetch and waits FetchCooldown
	// between fetches: its 100 ms default caps 64 workers at 640 jobs/s, so
	// the comparison uses River's minimum, 1 ms, unless told otherwise.
	cooldown := flag.Duration("fetch-cooldown", time.Millisecond, "River FetchCooldown")
	workload := flag.String("workload", "w1", "w1, or txinsert (see txinsert.go)")
	system := flag.String("system", "river", "txinsert: river, or rdq (on -schema, migrated by `rdq migrate`)")
	flag.Parse()
	ctx := context.Background()
	if *workload == "txinsert" {
		txInsert(ctx, *system, *dbURL, *schema, *jobs, *inflight)
		return
	}

	pool, err := pgxpool.New(ctx, *dbURL+"?pool_max_conns="+fmt.Sprint(*inflight+16))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+*schema+" CASCADE; CREATE SCHEMA "+*schema); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+*schema+" CASCADE")
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: *schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}

	ws := river.NewWorkers()
	river.AddWorker(ws, &NoopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:        *schema,
		FetchCooldown: *cooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers:       ws,
		Logger:        nil,
	})
	if err != nil {
		log.Fatal(err)
	}

	args := NoopArgs{Customer: "cus_0123456789abcdef", Note: strings.Repeat("x", 40)}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < *inflight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(*jobs) {
					return
				}
				a := args
				a.OrderID = int(n)
				if _, err := client.Insert(ctx, a, nil); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	submitSecs := time.Since(start).Seconds()
	payload, _ := json.Marshal(args)

	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: *jobs + 1000})
	defer cancel()
	start = time.Now()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for done := 0; done < *jobs; {
		select {
		case <-events:
			done++
		case <-time.After(60 * time.Second):
			log.Fatalf("stalled after %d jobs", done)
		}
	}
	workSecs := time.Since(start).Seconds()
	stopCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	_ = client.Stop(stopCtx)

	out, _ := json.Marshal(map[string]any{
		"system":         "river",
		"version":        "v0.51.2",
		"fetch_cooldown": cooldown.String(),
		"jobs":           *jobs,
		"payload_bytes":  len(payload),
		"submits_per_s":  float64(*jobs) / submitSecs,
		"worked_per_s":   float64(*jobs) / workSecs,
	})
	fmt.Fprintln(os.Stdout, string(out))
}
