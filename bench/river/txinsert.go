package main

// Transactional inserts: N single inserts by `inflight` goroutines, each
// `BEGIN; insert; COMMIT` on a pgxpool — River's Client.InsertTx on
// River's own schema, or rdq's pg.SubmitPgx on an rdq schema. Both encode
// the same JSON arguments per insert. Prints one JSON line with inserts/s.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"rdq.dev/sdk/go/pg"
	"rdq.dev/sdk/go/rdq"
)

func txInsert(ctx context.Context, system, dbURL, schema string, jobs, inflight int) {
	pool, err := pgxpool.New(ctx, dbURL+"?pool_max_conns="+fmt.Sprint(inflight+16))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var insert func(ctx context.Context, tx pgx.Tx, args NoopArgs) error
	switch system {
	case "river":
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
			log.Fatal(err)
		}
		defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		driver := riverpgxv5.New(pool)
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			log.Fatal(err)
		}
		ws := river.NewWorkers()
		river.AddWorker(ws, &NoopWorker{})
		// An insert-only client: it is never started.
		client, err := river.NewClient(driver, &river.Config{Schema: schema, Workers: ws})
		if err != nil {
			log.Fatal(err)
		}
		insert = func(ctx context.Context, tx pgx.Tx, args NoopArgs) error {
			_, err := client.InsertTx(ctx, tx, args, nil)
			return err
		}
	case "rdq":
		insert = func(ctx context.Context, tx pgx.Tx, args NoopArgs) error {
			payload, err := json.Marshal(args)
			if err != nil {
				return err
			}
			_, err = pg.SubmitPgx(ctx, tx, schema, rdq.Task{
				Queue: "default", HandlerRef: "noop", Payload: payload, ContentType: "application/json",
			})
			return err
		}
	default:
		log.Fatalf("unknown -system %q (river, rdq)", system)
	}

	args := NoopArgs{Customer: "cus_0123456789abcdef", Note: strings.Repeat("x", 40)}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(jobs) {
					return
				}
				a := args
				a.OrderID = int(n)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return insert(ctx, tx, a) })
				if err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	payload, _ := json.Marshal(args)
	out, _ := json.Marshal(map[string]any{
		"system":        system,
		"workload":      "txinsert",
		"jobs":          jobs,
		"inflight":      inflight,
		"payload_bytes": len(payload),
		"inserts_per_s": float64(jobs) / secs,
	})
	fmt.Fprintln(os.Stdout, string(out))
}
