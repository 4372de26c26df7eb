package rdq

import (
	"errors"
	"strings"
	"testing"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
)

func validProto() *rdqpb.Envelope {
	at := "2026-07-20T14:03:22.117Z"
	return &rdqpb.Envelope{
		EnvelopeVersion: 1, Id: "01J3Z8Q1W6G5X7V2K9M4N8P0RS", Queue: "emails", HandlerRef: "send",
		Status: rdqpb.Status_IN_FLIGHT, CreatedAt: at, LeaseExpiresAt: &at,
		Attempts: []*rdqpb.AttemptRecord{{AttemptNo: 1, StartedAt: at}},
		Omitted:  []string{"payload_ref"},
	}
}

func TestAnEnvelopeThatDoesNotMapIsRefusedNeverAPanic(t *testing.T) {
	bad := "yesterday"
	cases := map[string]func(p *rdqpb.Envelope){
		"version 2":         func(p *rdqpb.Envelope) { p.EnvelopeVersion = 2 },
		"bad id":            func(p *rdqpb.Envelope) { p.Id = "x" },
		"bad queue":         func(p *rdqpb.Envelope) { p.Queue = "Emails!" },
		"priority 256":      func(p *rdqpb.Envelope) { p.Priority = 256 },
		"no status":         func(p *rdqpb.Envelope) { p.Status = rdqpb.Status_STATUS_UNSPECIFIED },
		"unknown status":    func(p *rdqpb.Envelope) { p.Status = 99 },
		"bad created_at":    func(p *rdqpb.Envelope) { p.CreatedAt = bad },
		"bad lease end":     func(p *rdqpb.Envelope) { p.LeaseExpiresAt = &bad },
		"a nil attempt":     func(p *rdqpb.Envelope) { p.Attempts = append(p.Attempts, nil) },
		"bad started_at":    func(p *rdqpb.Envelope) { p.Attempts[0].StartedAt = bad },
		"unknown outcome":   func(p *rdqpb.Envelope) { p.Attempts[0].Outcome = 42 },
		"unknown omitted":   func(p *rdqpb.Envelope) { p.Omitted = []string{"id"} },
		"unknown_json list": func(p *rdqpb.Envelope) { p.UnknownJson = "[1]" },
		"duplicate keys":    func(p *rdqpb.Envelope) { p.UnknownJson = `{"a":1,"a":2}` },
		"detail not JSON": func(p *rdqpb.Envelope) {
			d := "{"
			p.Attempts[0].Error = &rdqpb.ErrorInfo{Type: "x", DetailJson: &d}
		},
	}
	if _, err := envelopeFromProto(nil); err == nil {
		t.Error("nil: accepted")
	}
	for name, spoil := range cases {
		p := validProto()
		spoil(p)
		_, err := envelopeFromProto(p)
		var e *envelope.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestAProtoEnvelopeKeepsWhatItsJSONWouldKeep(t *testing.T) {
	p := validProto()
	p.UnknownJson = `{"zeta":{"b":1E5,"a":[1.50]},"alpha":123456789012345678901234567890}`
	stack := "at main"
	detail := `{"n": 1.0}`
	p.Attempts[0].Error = &rdqpb.ErrorInfo{Type: "app.E", Message: "m", DetailJson: &detail, Stack: &stack}
	p.Attempts[0].Omitted = []string{"finished_at"}
	p.Omitted = append(p.Omitted, "dead_reason", "cancel_requested") // as the server sends a task without them
	env, err := envelopeFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"envelope_version":1,"id":"01J3Z8Q1W6G5X7V2K9M4N8P0RS","queue":"emails","handler_ref":"send","handler_version":null,` +
		`"payload":"","payload_content_type":"","headers":{},"status":"IN_FLIGHT","priority":0,"deferral_count":0,` +
		`"attempt_count":0,"redrive_count":0,"claim_count":0,"next_attempt_at":null,"lease_expires_at":"2026-07-20T14:03:22.117Z",` +
		`"created_at":"2026-07-20T14:03:22.117Z","attempts":[{"attempt_no":1,"started_at":"2026-07-20T14:03:22.117Z",` +
		`"outcome":null,"error":{"type":"app.E","message":"m","detail":{"n":1.0},"stack":"at main"}}],` +
		`"alpha":123456789012345678901234567890,"zeta":{"a":[1.50],"b":1e+5}}`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestAProblemBecomesAnErrorWithItsField(t *testing.T) {
	r := settleResultFromProto(&rdqpb.SettleItemResult{Id: "a", Problem: &rdqpb.Problem{
		Code: CodeInvalidField, Detail: "bad", HttpStatus: 400, ExtensionsJson: `{"field":"settles[0].defer_ms"}`}})
	var e *Error
	if !errors.As(r.Err, &e) || e.Code != CodeInvalidField || e.Status != 400 || e.Field != "settles[0].defer_ms" {
		t.Fatalf("%#v", r.Err)
	}
}

func TestADeadReasonMapsAsItsJSONWould(t *testing.T) {
	p := validProto()
	p.Status = rdqpb.Status_DEAD
	p.LeaseExpiresAt = nil
	p.Attempts = nil
	p.Omitted = append(p.Omitted, "attempts", "cancel_requested")
	p.DeadReason = &rdqpb.DeadReason{Code: "CANCELLED", At: "2026-07-20T14:04:00.000Z", By: "ops", Omitted: []string{"message"},
		UnknownJson: `{"zone":1.50}`}
	env, err := envelopeFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), `"created_at":"2026-07-20T14:03:22.117Z","dead_reason":{"code":"CANCELLED","at":"2026-07-20T14:04:00.000Z","by":"ops","zone":1.50}}`) {
		t.Fatalf("got %s", got)
	}
	// Unset and not named in omitted: the JSON had null.
	p.DeadReason = nil
	if env, err = envelopeFromProto(p); err != nil {
		t.Fatal(err)
	}
	if got, _ = env.Encode(); !strings.HasSuffix(string(got), `"dead_reason":null}`) {
		t.Fatalf("got %s", got)
	}
	p.DeadReason = &rdqpb.DeadReason{Code: "CANCELLED", At: "yesterday", By: "ops"}
	if _, err = envelopeFromProto(p); err == nil {
		t.Fatal("a bad dead_reason.at was accepted")
	}
}

func TestACancelRequestMapsAsItsJSONWould(t *testing.T) {
	p := validProto()
	p.Omitted = append(p.Omitted, "dead_reason")
	msg := "customer withdrew"
	p.CancelRequested = &rdqpb.CancelRequest{At: "2026-07-20T14:04:00.000Z", By: "ops", Message: &msg,
		UnknownJson: `{"zone":1.50}`}
	env, err := envelopeFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), `"cancel_requested":{"at":"2026-07-20T14:04:00.000Z","by":"ops","message":"customer withdrew","zone":1.50}}`) {
		t.Fatalf("got %s", got)
	}
	p.CancelRequested = &rdqpb.CancelRequest{At: "2026-07-20T14:04:00.000Z", By: "ops", Omitted: []string{"message"}}
	if env, err = envelopeFromProto(p); err != nil {
		t.Fatal(err)
	}
	if got, _ = env.Encode(); !strings.HasSuffix(string(got), `"cancel_requested":{"at":"2026-07-20T14:04:00.000Z","by":"ops"}}`) {
		t.Fatalf("got %s", got)
	}
	// Unset and not named in omitted: the JSON had null.
	p.CancelRequested = nil
	if env, err = envelopeFromProto(p); err != nil {
		t.Fatal(err)
	}
	if got, _ = env.Encode(); !strings.HasSuffix(string(got), `"cancel_requested":null}`) {
		t.Fatalf("got %s", got)
	}
	// Named in omitted: left out.
	p.Omitted = append(p.Omitted, "cancel_requested")
	if env, err = envelopeFromProto(p); err != nil {
		t.Fatal(err)
	}
	if got, _ = env.Encode(); strings.Contains(string(got), "cancel_requested") {
		t.Fatalf("got %s", got)
	}
	for name, bad := range map[string]*rdqpb.CancelRequest{
		"bad at":          {At: "yesterday", By: "ops"},
		"empty by":        {At: "2026-07-20T14:04:00.000Z"},
		"unknown omitted": {At: "2026-07-20T14:04:00.000Z", By: "ops", Omitted: []string{"by"}},
		"unknown_json":    {At: "2026-07-20T14:04:00.000Z", By: "ops", UnknownJson: "[1]"},
	} {
		p.CancelRequested = bad
		_, err := envelopeFromProto(p)
		var e *envelope.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
