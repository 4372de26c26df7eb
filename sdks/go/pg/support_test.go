package pg_test

// What the tests share: the test database, a freshly migrated rdq schema
// per test (dropped when it ends), an `rdq serve` on that schema, and one
// transaction type over database/sql and pgx so every test runs on both.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"rdq.dev/sdk/go/pg"
	"rdq.dev/sdk/go/rdq"
)

// databaseURL is RDQ_TEST_POSTGRES, else the local test database.
func databaseURL() string {
	if u := os.Getenv("RDQ_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

func withSchema(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "schema=" + schema
}

// rdqBinary is RDQ_BIN, else target/debug/rdq after `cargo build --workspace --bin rdq`.
func rdqBinary(t *testing.T) string {
	if p := os.Getenv("RDQ_BIN"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	cmd := exec.Command("cargo", "build", "--workspace", "--bin", "rdq")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cargo build --workspace --bin rdq: %v\n%s", err, out)
	}
	return filepath.Join(root, "target", "debug", "rdq")
}

// newSchema migrates a fresh rdq schema with `rdq migrate` and drops it
// when the test ends.
func newSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "rdq_go_pg_" + hex.EncodeToString(b[:])
	out, err := exec.Command(rdqBinary(t), "migrate", "--store", withSchema(databaseURL(), schema)).CombinedOutput()
	if err != nil {
		t.Fatalf("rdq migrate: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
	})
	return schema
}

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		t.Skipf("PostgreSQL is not reachable at %s: %v", databaseURL(), err)
	}
	return pool
}

// serve runs `rdq serve` on schema and answers a client of it.
func serve(t *testing.T, schema string) *rdq.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs strings.Builder
	cmd := exec.Command(rdqBinary(t), "serve", "--listen", addr, "--store", withSchema(databaseURL(), schema), "--log", "warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	url := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdq serve did not become ready:\n%s", logs.String())
		}
	}
	client, err := rdq.NewClient(rdq.ClientConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// tx is a transaction on either API.
type tx interface {
	submit(ctx context.Context, schema string, task rdq.Task) (string, error)
	complete(ctx context.Context, schema, id, leaseToken string) error
	exec(ctx context.Context, query string) error
	commit() error
	rollback() error
}

// driver opens transactions on one API.
type driver struct {
	name  string
	begin func(t *testing.T, ctx context.Context) tx
}

// drivers answers database/sql (through pgx's stdlib driver) and pgx (on pool).
func drivers(t *testing.T, pool *pgxpool.Pool) []driver {
	db, err := sql.Open("pgx", databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return []driver{
		{"database-sql", func(t *testing.T, ctx context.Context) tx {
			x, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return sqlTx{x}
		}},
		{"pgx", func(t *testing.T, ctx context.Context) tx {
			x, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return pgxTx{x}
		}},
	}
}

type sqlTx struct{ tx *sql.Tx }

func (x sqlTx) submit(ctx context.Context, schema string, task rdq.Task) (string, error) {
	return pg.Submit(ctx, x.tx, schema, task)
}
func (x sqlTx) complete(ctx context.Context, schema, id, leaseToken string) error {
	return pg.Complete(ctx, x.tx, schema, id, leaseToken)
}
func (x sqlTx) exec(ctx context.Context, q string) error {
	_, err := x.tx.ExecContext(ctx, q)
	return err
}
func (x sqlTx) commit() error   { return x.tx.Commit() }
func (x sqlTx) rollback() error { return x.tx.Rollback() }

type pgxTx struct{ tx pgx.Tx }

func (x pgxTx) submit(ctx context.Context, schema string, task rdq.Task) (string, error) {
	return pg.SubmitPgx(ctx, x.tx, schema, task)
}
func (x pgxTx) complete(ctx context.Context, schema, id, leaseToken string) error {
	return pg.CompletePgx(ctx, x.tx, schema, id, leaseToken)
}
func (x pgxTx) exec(ctx context.Context, q string) error { _, err := x.tx.Exec(ctx, q); return err }
func (x pgxTx) commit() error                            { return x.tx.Commit(context.Background()) }
func (x pgxTx) rollback() error                          { return x.tx.Rollback(context.Background()) }

// rows counts schema's tasks, as another connection sees them.
func rows(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stored is task id's stored envelope, or nil.
func stored(t *testing.T, pool *pgxpool.Pool, schema, id string) []byte {
	t.Helper()
	var b []byte
	err := pool.QueryRow(context.Background(),
		fmt.Sprintf("SELECT t.envelope FROM %s.tasks t WHERE %[1]s.task_id_text(t.id) = $1", schema), id).Scan(&b)
	if err == pgx.ErrNoRows {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}
