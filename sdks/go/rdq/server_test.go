package rdq_test

// The end-to-end tests run against a real `rdq serve`: the binary named by
// RDQ_BIN, or one built with cargo in the repository. Each store gets one
// server for the whole run; every test uses queues of its own.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

const postgresURL = "postgres://postgres@127.0.0.1:5432/test"

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// rdqBinary is RDQ_BIN, or target/debug/rdq after `cargo build --workspace --bin rdq`.
func rdqBinary(t testing.TB) string {
	binOnce.Do(func() {
		if p := os.Getenv("RDQ_BIN"); p != "" {
			binPath = p
			return
		}
		root := repoRoot()
		cmd := exec.Command("cargo", "build", "--workspace", "--bin", "rdq")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("cargo build --workspace --bin rdq: %v\n%s", err, out)
			return
		}
		binPath = filepath.Join(root, "target", "debug", "rdq")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// server is one running `rdq serve`.
type server struct {
	url    string
	cmd    *exec.Cmd
	schema string // PostgreSQL schema to drop afterwards
	logs   *logBuffer
}

type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startServer runs `rdq serve` on a free loopback port over store (a data
// directory or a postgres:// URL), with extra flags, and waits until ready.
// With --tls-cert among the flags its URL is https://.
func startServer(t testing.TB, store string, extra ...string) *server {
	bin := rdqBinary(t)
	port := freePort(t)
	args := append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--store", store, "--log", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, logs: logs}
	probe := http.DefaultClient
	if slices.Contains(extra, "--tls-cert") {
		s.url = fmt.Sprintf("https://127.0.0.1:%d", port)
		// Readiness only: the tests check the certificate with their own client.
		probe = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := probe.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			s.stop()
			t.Fatalf("rdq serve did not become ready: %v\n%s", err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	if s.schema != "" {
		dropSchema(s.schema)
	}
}

func dropSchema(schema string) {
	out, err := exec.Command("psql", postgresURL, "-q", "-c", "DROP SCHEMA IF EXISTS "+schema+" CASCADE").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dropping schema %s: %v %s\n", schema, err, out)
	}
}

func postgresReachable() bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// backends are the stores the end-to-end tests run on. Each test gets a
// server of its own: a fresh data directory, or a fresh PostgreSQL schema
// dropped when the test ends.
var backends = []struct {
	name  string
	store func(t *testing.T) (store, schema string)
}{
	{"embedded", func(t *testing.T) (string, string) { return filepath.Join(t.TempDir(), "data"), "" }},
	{"postgres", func(t *testing.T) (string, string) {
		if !postgresReachable() {
			t.Skip("PostgreSQL is not reachable on 127.0.0.1:5432")
		}
		schema := "rdq_go_sdk_" + randomSuffix()
		return postgresURL + "?schema=" + schema, schema
	}},
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChildWorker()
		return
	}
	os.Exit(m.Run())
}

// forEachStore runs body once per store, as a subtest named after it, with
// a client of a server of its own.
func forEachStore(t *testing.T, body func(t *testing.T, c *rdq.Client, url string)) {
	for _, b := range backends {
		b := b
		t.Run(b.name, func(t *testing.T) {
			store, schema := b.store(t)
			s := startServer(t, store)
			s.schema = schema
			t.Cleanup(s.stop)
			body(t, newClient(t, s.url), s.url)
		})
	}
}

// transports are the ways a worker works; the worker tests run on each.
var transports = []rdq.Transport{rdq.TransportGRPC, rdq.TransportHTTP}

// forEachStoreAndTransport runs body once per store and transport, as
// subtests store/transport, with a client of a server of its own.
func forEachStoreAndTransport(t *testing.T, body func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport)) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		for _, tr := range transports {
			t.Run(tr.String(), func(t *testing.T) { body(t, c, url, tr) })
		}
	})
}

func newClient(t testing.TB, url string) *rdq.Client {
	return newClientWith(t, rdq.ClientConfig{URL: url})
}

func newClientWith(t testing.TB, cfg rdq.ClientConfig) *rdq.Client {
	c, err := rdq.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queueName is a queue of this test's own.
func queueName(t testing.TB) string {
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 200 {
		name = name[:200]
	}
	return name + "-" + randomSuffix()
}

func configure(t testing.TB, c *rdq.Client, queue string, patch map[string]any) {
	if _, err := c.SetQueueConfig(context.Background(), queue, patch); err != nil {
		t.Fatalf("configuring %s: %v", queue, err)
	}
}

// waitFor polls the task until done says so, or fails after a minute.
func waitFor(t testing.TB, c *rdq.Client, id string, what string, done func(envelope.Envelope) bool) envelope.Envelope {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		env, err := c.Get(context.Background(), id)
		if err == nil && done(env) {
			return env
		}
		if time.Now().After(deadline) {
			b, _ := env.Encode()
			t.Fatalf("task %s never became %s (last error %v): %s", id, what, err, b)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func terminal(env envelope.Envelope) bool {
	return env.Status == envelope.StatusSucceeded || env.Status == envelope.StatusDead
}

// runWorker runs a worker until the test ends.
func runWorker(t testing.TB, c *rdq.Client, cfg rdq.WorkerConfig) {
	w, err := rdq.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

func submit(t testing.TB, c *rdq.Client, task rdq.Task) envelope.Envelope {
	t.Helper()
	s, err := c.Submit(context.Background(), task)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return s.Envelope
}

// Child worker process: used by the kill -9 test.

const childEnv = "RDQ_GO_SDK_CHILD_WORKER"

func runChildWorker() {
	c, err := rdq.NewClient(rdq.ClientConfig{URL: os.Getenv("RDQ_GO_SDK_CHILD_URL")})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	reg := rdq.NewRegistry()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	reg.Register("hang", func(ctx context.Context, task envelope.Envelope) error {
		mu.Lock()
		fmt.Fprintf(out, "started %s\n", task.ID)
		out.Flush()
		mu.Unlock()
		select {} // until killed
	})
	tr := rdq.TransportHTTP
	if os.Getenv("RDQ_GO_SDK_CHILD_TRANSPORT") == rdq.TransportGRPC.String() {
		tr = rdq.TransportGRPC
	}
	w, err := rdq.NewWorker(c, rdq.WorkerConfig{Queues: []string{os.Getenv("RDQ_GO_SDK_CHILD_QUEUE")}, Registry: reg, Transport: tr, PollInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	_ = w.Run(context.Background())
}
