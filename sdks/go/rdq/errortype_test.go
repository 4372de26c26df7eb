package rdq_test

// docs/sdk-go.md shows, in a table, the error_type the outcome ladder records
// for errors the standard library really returns. This test makes each of
// those errors, resolves it as a handler's return value, and holds the
// table to what it gets.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// The classifiers the table's last two columns are worked out with, as the
// doc shows them.
var docClassifiers = []rdq.Classifier{
	rdq.PermanentIs(fs.ErrNotExist).Named("fs.NotExist"),
	rdq.RetryableIs(syscall.ECONNREFUSED).Named("net.ConnectionRefused"),
	rdq.RetryableIs(context.DeadlineExceeded).Named("timeout"),
}

func refusedDial(t *testing.T) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
		t.Fatal("the dial was not refused")
	}
	return err
}

func httpClientTimeout(t *testing.T) error {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer stall.Close()
	resp, err := (&http.Client{Timeout: 20 * time.Millisecond}).Get(stall.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("the request did not time out")
	}
	return err
}

func expiredDeadline(t *testing.T) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	return ctx.Err()
}

func missingFile(t *testing.T) error {
	f, err := os.Open(filepath.Join(t.TempDir(), "missing.csv"))
	if err == nil {
		f.Close()
		t.Fatal("the file exists")
	}
	return err
}

func undecodablePayload(t *testing.T) error {
	type charge struct {
		OrderID int64 `json:"order_id"`
	}
	h := rdq.JSONHandler(func(ctx context.Context, c charge, task envelope.Envelope) error { return nil })
	return h(context.Background(), envelope.Envelope{HandlerRef: "charge", Payload: []byte(`{"order_id":"42"}`)})
}

// errorRows are the table's rows by their first cell: how the error is made.
var errorRows = map[string]func(t *testing.T) error{
	"`errors.New(\"boom\")`": func(*testing.T) error { return errors.New("boom") },
	"`fmt.Errorf(\"decoding: %w\", json.Unmarshal(…))` of bad JSON": func(*testing.T) error {
		var v any
		return fmt.Errorf("decoding: %w", json.Unmarshal([]byte("{"), &v))
	},
	"`net.Dial(\"tcp\", addr)`, refused":                 refusedDial,
	"`http.Client{Timeout: d}.Get(url)`, timed out":      httpClientTimeout,
	"`ctx.Err()` once its deadline has passed":           expiredDeadline,
	"`os.Open(path)` of a missing file":                  missingFile,
	"`errors.Join(err, io.EOF)`, `err` a refused dial":   func(t *testing.T) error { return errors.Join(refusedDial(t), io.EOF) },
	"`rdq.PermanentAs(\"billing.Declined\", err)`":       func(*testing.T) error { return rdq.PermanentAs("billing.Declined", errors.New("declined")) },
	"a `rdq.JSONHandler`'s payload that does not decode": undecodablePayload,
}

// errorTable reads the rows of the table that follows the marker naming
// this test in docs/sdk-go.md: first cell → the other cells.
func errorTable(t *testing.T) map[string][]string {
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "sdk-go.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- checked by TestTheErrorTypeTableIsWhatTheLadderRecords -->"
	_, after, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/sdk-go.md has no %s", marker)
	}
	rows := map[string][]string{}
	for i, line := range strings.Split(strings.TrimSpace(after), "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 { // the header and its rule
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows[cells[0]] = cells[1:]
	}
	return rows
}

func TestTheErrorTypeTableIsWhatTheLadderRecords(t *testing.T) {
	table := errorTable(t)
	for first := range table {
		if errorRows[first] == nil {
			t.Errorf("the doc's row %q is not checked here", first)
		}
	}
	for first, make := range errorRows {
		want, ok := table[first]
		if !ok {
			t.Errorf("the doc has no row %q", first)
			continue
		}
		err := make(t)
		plain := rdq.Resolve(nil, err, nil, nil)
		classified := rdq.Resolve(nil, err, nil, docClassifiers)
		got := []string{"`" + plain.ErrorType() + "`", plain.Settlement(), "`" + classified.ErrorType() + "`", classified.Settlement()}
		if strings.Join(got, " | ") != strings.Join(want, " | ") {
			t.Errorf("%s (%v):\n got %s\nthe doc says %s", first, err, strings.Join(got, " | "), strings.Join(want, " | "))
		}
		// Wrapping with %w never changes what is recorded.
		wrapped := rdq.Resolve(nil, fmt.Errorf("charging order 42: %w", err), nil, docClassifiers)
		if wrapped.ErrorType() != classified.ErrorType() || wrapped.Settlement() != classified.Settlement() {
			t.Errorf("%s wrapped: %s %s", first, wrapped.ErrorType(), wrapped.Settlement())
		}
	}
}
