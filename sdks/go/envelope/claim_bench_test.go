package envelope

import (
	"strings"
	"testing"
)

// BenchmarkDecodeClaimAnswer decodes a claim answer of 64 tasks as the
// server writes them (go test -bench DecodeClaimAnswer ./envelope).
func BenchmarkDecodeClaimAnswer(b *testing.B) {
	task := `{"id":"01M8SAMPWH9ZYJ7R55WZ5VP7VT","lease_token":"1.c30aafa6c1df8911dd519ae9a7736d8c","envelope":{"envelope_version":1,"id":"01M8SAMPWH9ZYJ7R55WZ5VP7VT","queue":"q1","handler_ref":"h","handler_version":null,"payload":"eyJhIjoxfQ==","payload_content_type":"application/json","headers":{},"status":"IN_FLIGHT","priority":0,"deferral_count":0,"attempt_count":1,"redrive_count":0,"claim_count":1,"next_attempt_at":"2026-12-01T17:32:35.089Z","lease_expires_at":"2026-12-01T17:33:05.100Z","created_at":"2026-12-01T17:32:35.089Z","attempts":[{"attempt_no":1,"started_at":"2026-12-01T17:32:35.100Z","finished_at":null,"outcome":null,"error":null}]}}`
	doc := []byte(`{"tasks":[` + strings.TrimSuffix(strings.Repeat(task+",", 64), ",") + `]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for i := 0; i < b.N; i++ {
		if _, err := DecodeClaimAnswer(doc); err != nil {
			b.Fatal(err)
		}
	}
}
