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

// The pending task of dead_reason_null.json (its writer left handler_version
// out, which only a decoded envelope can remember) fails permanently; built
// here field by field, it must encode as rdq writes it.
func TestADeadReasonBuiltInGoEncodesAsRustWritesIt(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(fixturesDir(t), "valid", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	env, err := Decode(read("dead_reason_null.json"))
	if err != nil {
		t.Fatal(err)
	}
	started := env.CreatedAt.Add(83 * time.Millisecond)
	finished := started.Add(750 * time.Millisecond)
	cause := ErrorInfo{Type: "app.InvalidCard", Message: "card 4242 was declined"}
	env.Status = StatusDead
	env.AttemptCount = 1
	env.ClaimCount = 1
	env.NextAttemptAt = nil
	env.Attempts = []Attempt{{AttemptNo: 1, StartedAt: started, FinishedAt: &finished,
		Outcome: OutcomePermanentFailure, Error: &cause}}
	reason := NewDeadReason(DeadReasonPermanentFailure, "worker", finished, cause.Type+": "+cause.Message)
	env.DeadReason = &reason

	got, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := read("dead_reason_permanent.json"); !bytes.Equal(got, want) {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestAnUnsetDeadReasonIsLeftOutUnlessWrittenAsNull(t *testing.T) {
	env := New("q", "h", nil, "x", time.Date(2026, 7, 20, 14, 3, 22, 0, time.UTC))
	out, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "dead_reason") {
		t.Fatalf("a new envelope wrote its unset reason: %s", out)
	}

	written, err := Decode([]byte("{" + base + `,"dead_reason":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if written.DeadReason != nil {
		t.Fatalf("null decoded as %+v", written.DeadReason)
	}
	if out, _ := written.Encode(); !strings.HasSuffix(string(out), `,"dead_reason":null}`) {
		t.Fatalf("a null reason was not kept: %s", out)
	}
	written.MarkWritten()
	if out, _ := written.Encode(); strings.Contains(string(out), "dead_reason") {
		t.Fatalf("MarkWritten kept the null reason: %s", out)
	}
}

func TestAMessageLeftOutStaysOutAndANilOneIsWrittenAsNull(t *testing.T) {
	in := []byte("{" + base + `,"dead_reason":{"code":"CANCELLED","at":"2026-07-20T14:03:22.117Z","by":"ops"}}`)
	env, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := env.Encode(); !strings.HasSuffix(string(out), `"by":"ops"}}`) {
		t.Fatalf("the absent message was written: %s", out)
	}
	built := DeadReason{Code: DeadReasonCancelled, At: env.CreatedAt, By: "ops"}
	env.DeadReason = &built
	if out, _ := env.Encode(); !strings.HasSuffix(string(out), `"by":"ops","message":null}}`) {
		t.Fatalf("a reason built without a message left it out: %s", out)
	}
}

func TestEncodeRefusesADeadReasonADecoderWouldRefuse(t *testing.T) {
	at := time.Date(2026, 7, 20, 14, 3, 22, 0, time.UTC)
	for _, c := range []struct {
		reason DeadReason
		path   string
	}{
		{DeadReason{Code: "cancelled", At: at, By: "ops"}, "dead_reason.code"},
		{DeadReason{Code: strings.Repeat("A", 65), At: at, By: "ops"}, "dead_reason.code"},
		{DeadReason{Code: "", At: at, By: "ops"}, "dead_reason.code"},
		{DeadReason{Code: DeadReasonCancelled, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), By: "ops"}, "dead_reason.at"},
		{DeadReason{Code: DeadReasonCancelled, At: at}, "dead_reason.by"},
	} {
		env := New("q", "h", nil, "x", at)
		env.DeadReason = &c.reason
		_, err := env.Encode()
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidField || e.Path != c.path {
			t.Errorf("%+v: %v; want INVALID_FIELD at %s", c.reason, err, c.path)
		}
	}
}

func TestReasonCodesAreUpperCaseWordsOfAtMost64Bytes(t *testing.T) {
	for _, code := range []string{DeadReasonAttemptsExhausted, DeadReasonPermanentFailure,
		DeadReasonLeaseExpiriesExhausted, DeadReasonCancelled, DeadReasonHandlerVersionMismatch,
		DeadReasonCountersExhausted, "QUOTA_REVOKED", "A", "A1_", strings.Repeat("A", 64)} {
		if !IsValidDeadReasonCode(code) {
			t.Errorf("%q refused", code)
		}
	}
	for _, code := range []string{"", "_A", "1A", "a", "Cancelled", "A-B", "A B", "É", strings.Repeat("A", 65)} {
		if IsValidDeadReasonCode(code) {
			t.Errorf("%q accepted", code)
		}
	}
}
