package envelope

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const base = `"envelope_version":1,"id":"01J2ZK7Q8XW5H3N9G4T6B8RDQ0","queue":"q","handler_ref":"h","payload":"","payload_content_type":"x","status":"PENDING","attempt_count":0,"redrive_count":0,"next_attempt_at":null,"lease_expires_at":null,"created_at":"2026-07-20T14:03:22.117Z"`

func withX(x string) []byte { return []byte("{" + base + `,"x":` + x + "}") }

func codeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestNumbersInUnknownFieldsKeepEveryDigit(t *testing.T) {
	for _, x := range []string{
		"18446744073709551616",
		"123456789012345678901234567890",
		"-9223372036854775809",
		"0.1000000000000000055511151231257827",
		"3.14159265358979323846264338327950288",
		"-0", "668.0", "2.50", "1e-400", "1e+400",
		`{"b":[1.0,2.50],"a":99999999999999999999}`,
	} {
		env, err := Decode(withX(x))
		if err != nil {
			t.Fatalf("%s: %v", x, err)
		}
		out, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		want := x
		if strings.HasPrefix(x, "{") {
			want = `{"a":99999999999999999999,"b":[1.0,2.50]}` // keys sorted, digits kept
		}
		if !bytes.HasSuffix(out, []byte(`,"x":`+want+"}")) {
			t.Errorf("%s was re-encoded as %s", x, out[bytes.LastIndex(out, []byte(`"x":`)):])
		}
	}
}

func TestOnlyTheExponentsSpellingIsNormalised(t *testing.T) {
	for in, want := range map[string]string{
		"1e400": "1e+400", "1E5": "1e+5", "1.5E+300": "1.5e+300", "1.0E-05": "1.0e-05", "-2e0": "-2e+0",
	} {
		env, err := Decode(withX(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		out, _ := env.Encode()
		if !bytes.HasSuffix(out, []byte(`,"x":`+want+"}")) {
			t.Errorf("%s was re-encoded as %s", in, out[bytes.LastIndex(out, []byte(`"x":`)):])
		}
	}
	for _, known := range []string{`"priority":1e0`, `"attempt_count":1e400`} {
		if _, err := Decode([]byte("{" + strings.Replace(base, `"attempt_count":0`, known, 1) + "}")); codeOf(err) != CodeMalformedEnvelope {
			t.Errorf("%s: %v", known, err)
		}
	}
}

func TestNestingIsLimitedLikeSerdeJSON(t *testing.T) {
	ok := strings.Repeat("[", 126) + strings.Repeat("]", 126) // 127 levels with the envelope
	if _, err := Decode(withX(ok)); err != nil {
		t.Fatalf("126 nested arrays: %v", err)
	}
	deep := strings.Repeat("[", 127) + strings.Repeat("]", 127)
	if _, err := Decode(withX(deep)); codeOf(err) != CodeMalformedEnvelope {
		t.Fatalf("127 nested arrays: %v", err)
	}
}

func TestStringsAreWrittenWithSerdeJSONsEscapes(t *testing.T) {
	env, err := Decode(withX(`"\u00e9\u2028\/\u0001\u007f\"\\\b\f\n\r\t\ud83d\ude00"`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := env.Encode()
	want := `"x":"é` + "\u2028" + `/\u0001` + "\x7f" + `\"\\\b\f\n\r\t😀"}`
	if !bytes.HasSuffix(out, []byte(want)) {
		t.Fatalf("got %s", out[bytes.LastIndex(out, []byte(`"x":`)):])
	}
}

func TestTruncationCutsOnACharacterBoundaryWithTheMarker(t *testing.T) {
	if TruncateMessage("boom") != "boom" {
		t.Fatal("short text changed")
	}
	exact := strings.Repeat("x", MaxMessageBytes)
	if TruncateMessage(exact) != exact {
		t.Fatal("text of exactly the limit changed")
	}
	if got := TruncateMessage(exact + "x"); len(got) != MaxMessageBytes || !strings.HasSuffix(got, TruncationMarker) {
		t.Fatalf("%d bytes", len(got))
	}
	if got := TruncateStack(strings.Repeat("y", 100_000)); len(got) != MaxStackBytes {
		t.Fatalf("stack %d bytes", len(got))
	}
	for pad := 0; pad < 4; pad++ {
		text := strings.Repeat("a", pad) + strings.Repeat("🦀", 2000)
		cut := TruncateMessage(text)
		body := strings.TrimSuffix(cut, TruncationMarker)
		if len(cut) > MaxMessageBytes || !utf8.ValidString(cut) || !strings.HasPrefix(text, body) ||
			len(body) <= MaxMessageBytes-len(TruncationMarker)-4 {
			t.Fatalf("pad %d: %d bytes", pad, len(cut))
		}
	}
}

func TestReservedHeadersAreRefusedInAnyCase(t *testing.T) {
	for _, k := range []string{"rdq.source", "RDQ.x", "Rdq.submitted_by", "rDq.", "rdq."} {
		err := ValidateUserHeaders(map[string]string{"a": "1", k: "x"})
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeReservedHeader || e.Path != "headers."+k {
			t.Errorf("%q: %v", k, err)
		}
	}
	for _, k := range []string{"rdq", "rdqx.y", "r.dq", "é", "traceparent"} {
		if err := ValidateUserHeaders(map[string]string{k: "x"}); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
}

func TestNamesFollowTheCharsetAndLengthRule(t *testing.T) {
	for _, n := range []string{"payments.charge", "a-b_c.0", strings.Repeat("a", 240), "...", ".a"} {
		if !IsValidName(n) {
			t.Errorf("%q refused", n)
		}
	}
	for _, n := range []string{"", ".", "..", strings.Repeat("a", 241), "Payments", "a b", "a/b", "café"} {
		if IsValidName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}

func TestAnEnvelopeBuiltInGoEncodesAndDecodesBack(t *testing.T) {
	now := time.Date(2026, 7, 20, 14, 3, 22, 117_999_999, time.UTC)
	env := New("payments.charge", "charge-payment", []byte{0, 1, 2, 250}, "application/octet-stream", now)
	env.Headers["traceparent"] = "00-ab-01"
	stack := "at main"
	fin := now.Add(time.Second)
	env.Attempts = append(env.Attempts, Attempt{AttemptNo: 1, StartedAt: now, FinishedAt: &fin,
		Outcome: OutcomeRetryableFailure, Error: &ErrorInfo{Type: "*net.OpError", Message: "refused", Stack: &stack, Detail: []byte(`{ "b" : 1, "a" : [ ] }`)}})
	out, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	again, _ := back.Encode()
	if !bytes.Equal(out, again) || !bytes.Equal(back.Payload, []byte{0, 1, 2, 250}) ||
		!strings.Contains(string(out), `"created_at":"2026-07-20T14:03:22.117Z"`) ||
		!strings.Contains(string(out), `"detail":{"a":[],"b":1}`) || strings.Contains(string(out), "payload_ref") {
		t.Fatalf("%s\n%s", out, again)
	}
	env.Queue = "Bad"
	if _, err := env.Encode(); codeOf(err) != CodeInvalidQueueName {
		t.Fatalf("a bad queue encoded: %v", err)
	}
}

func TestIDsAreValidAndIncreasing(t *testing.T) {
	prev := NewID()
	for i := 0; i < 10000; i++ {
		id := NewID()
		if !IsValidID(id) || id <= prev {
			t.Fatalf("%s after %s", id, prev)
		}
		prev = id
	}
}

// TestTheRustCLIAgrees feeds inputs to `rdq envelope check` (RDQ_BIN) and to
// this codec and compares canonical output or error code. Exact numbers
// are pinned by the fixtures (unknown_numbers_exact), which a Rust binary
// older than its arbitrary-precision codec would not pass, so they are left
// out here.
func TestTheRustCLIAgrees(t *testing.T) {
	bin := os.Getenv("RDQ_BIN")
	if bin == "" {
		t.Skip("RDQ_BIN is not set")
	}
	inputs := [][]byte{
		withX(`"\u00e9\u2028\/\u0001\u007f\ud83d\ude00"`),
		withX(`{"z":1,"a":{"y":[true,false,null],"b":-12}}`),
		withX(`"\ud800"`),
		withX(`"\udc00x"`),
		withX(strings.Repeat("[", 126) + strings.Repeat("]", 126)),
		withX(strings.Repeat("[", 127) + strings.Repeat("]", 127)),
		withX(`18446744073709551615`),
		withX(`-9223372036854775808`),
		withX("\"tab\there\""),
		[]byte("{" + base + `,"headers":{"b":1,"a":2}}`),
		[]byte("{" + base + `,"priority":-1}`),
		[]byte("{" + base + `,"priority":1.0}`),
		[]byte("{" + base + `,"priority":null}`),
		[]byte("{" + base + `,"headers":null}`),
		[]byte(`{"envelope_version":2,"id":1}`),
		[]byte(`{"envelope_version":18446744073709551616}`),
		[]byte(`{"envelope_version":-1}`),
		[]byte(`{"envelope_version":1.0}`),
		[]byte("{" + base + `,"attempts":[{"attempt_no":1,"started_at":"2026-07-20T14:03:22.117Z","error":{"type":"t","message":"m","extra":{"k":"v"}},"x":1}]}`),
		[]byte("{" + base + `,"attempts":[null]}`),
		[]byte(" {" + base + "} \n"),
		[]byte("{" + base + "} x"),
	}
	for _, in := range inputs {
		cmd := exec.Command(bin, "envelope", "check", "-")
		cmd.Stdin = bytes.NewReader(in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		env, err := Decode(in)
		if runErr != nil {
			rustCode := strings.SplitN(strings.TrimSpace(stdout.String()+stderr.String()), ":", 2)[0]
			if err == nil || string(codeOf(err)) != rustCode {
				t.Errorf("%.120s: Rust refused with %s, Go: %v", in, rustCode, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%.120s: Rust accepted, Go: %v", in, err)
			continue
		}
		out, _ := env.Encode()
		if got := bytes.TrimSpace(stdout.Bytes()); !bytes.Equal(got, out) {
			t.Errorf("encodings differ:\nrust %s\n  go %s", got, out)
		}
	}
}
