package envelope

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cancel_requested_running.json's request, built in Go on the decoded task
// without it, must encode as rdq writes it.
func TestACancelRequestBuiltInGoEncodesAsRustWritesIt(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(fixturesDir(t), "valid", "cancel_requested_running.json"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	if r := env.CancelRequested; r == nil || r.By != "ops@example.com" || r.Message == nil ||
		*r.Message != "customer withdrew the order" || r.At.Format(time.RFC3339Nano) != "2026-07-20T14:03:30Z" {
		t.Fatalf("decoded %+v", env.CancelRequested)
	}
	env.CancelRequested = nil
	at := time.Date(2026, 7, 20, 14, 3, 30, 400_000, time.UTC) // cut to the millisecond
	req := NewCancelRequest("ops@example.com", at, "customer withdrew the order")
	env.CancelRequested = &req
	got, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestACancelRequestComesAfterTheDeadReason(t *testing.T) {
	env := New("q", "h", nil, "x", time.Date(2026, 7, 20, 14, 3, 22, 0, time.UTC))
	reason := NewDeadReason(DeadReasonCancelled, "ops", env.CreatedAt, "m")
	req := NewCancelRequest("ops", env.CreatedAt, "m")
	env.DeadReason, env.CancelRequested = &reason, &req
	out, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.HasSuffix(s, `"dead_reason":{"code":"CANCELLED","at":"2026-07-20T14:03:22.000Z","by":"ops","message":"m"},`+
		`"cancel_requested":{"at":"2026-07-20T14:03:22.000Z","by":"ops","message":"m"}}`) {
		t.Fatalf("order: %s", s)
	}
}

func TestAnUnsetCancelRequestIsLeftOutUnlessWrittenAsNull(t *testing.T) {
	env := New("q", "h", nil, "x", time.Date(2026, 7, 20, 14, 3, 22, 0, time.UTC))
	out, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "cancel_requested") {
		t.Fatalf("a new envelope wrote its unset request: %s", out)
	}
	written, err := Decode([]byte("{" + base + `,"cancel_requested":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if written.CancelRequested != nil {
		t.Fatalf("null decoded as %+v", written.CancelRequested)
	}
	if out, _ := written.Encode(); !strings.HasSuffix(string(out), `,"cancel_requested":null}`) {
		t.Fatalf("a null request was not kept: %s", out)
	}
	written.Omit("cancel_requested")
	if out, _ := written.Encode(); strings.Contains(string(out), "cancel_requested") {
		t.Fatalf("Omit kept the null request: %s", out)
	}
	written.NullCancelRequested()
	written.MarkWritten()
	if out, _ := written.Encode(); strings.Contains(string(out), "cancel_requested") {
		t.Fatalf("MarkWritten kept the null request: %s", out)
	}
}

func TestACancelRequestMessageLeftOutStaysOut(t *testing.T) {
	in := []byte("{" + base + `,"cancel_requested":{"at":"2026-07-20T14:03:22.117Z","by":"ops"}}`)
	env, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := env.Encode(); !strings.HasSuffix(string(out), `"by":"ops"}}`) {
		t.Fatalf("the absent message was written: %s", out)
	}
	built := CancelRequest{At: env.CreatedAt, By: "ops"}
	env.CancelRequested = &built
	if out, _ := env.Encode(); !strings.HasSuffix(string(out), `"by":"ops","message":null}}`) {
		t.Fatalf("a request built without a message left it out: %s", out)
	}
	built.Omit("message")
	if out, _ := env.Encode(); !strings.HasSuffix(string(out), `"by":"ops"}}`) {
		t.Fatalf("Omit(message) was not honoured: %s", out)
	}
	if built.Omit("by") {
		t.Fatal("Omit(by) answered true")
	}
}

func TestEncodeRefusesACancelRequestADecoderWouldRefuse(t *testing.T) {
	at := time.Date(2026, 7, 20, 14, 3, 22, 0, time.UTC)
	for _, c := range []struct {
		req  CancelRequest
		path string
	}{
		{CancelRequest{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), By: "ops"}, "cancel_requested.at"},
		{CancelRequest{At: at}, "cancel_requested.by"},
	} {
		env := New("q", "h", nil, "x", at)
		env.CancelRequested = &c.req
		_, err := env.Encode()
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidField || e.Path != c.path {
			t.Errorf("%+v: %v; want INVALID_FIELD at %s", c.req, err, c.path)
		}
	}
}
