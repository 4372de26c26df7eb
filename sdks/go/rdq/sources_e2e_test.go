package rdq_test

// Sources against a real server: `rdq serve --config FILE` with two
// `[[sources]]` tables whose servers cannot be reached, a NATS JetStream
// stream and an SQS queue. The server runs them anyway; each shows how it stands.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rdq.dev/sdk/go/rdq"
)

// sourcesConfig is a configuration file with a NATS JetStream source and
// an SQS source on queue, both pointing at a port nothing listens on.
func sourcesConfig(t *testing.T, natsName, sqsName, queue string) string {
	file := filepath.Join(t.TempDir(), "rdq.toml")
	config := fmt.Sprintf(`
[[sources]]
name = %[1]q
queue = %[3]q
handler = "audit.record"
retry_ms = 100

[sources.nats]
url = "nats://127.0.0.1:1"
stream = "AUDIT"

[[sources]]
name = %[2]q
queue = %[3]q
handler = "invoice.issue"

[sources.sqs]
queue_url = "http://127.0.0.1:1/000000000000/invoices"
endpoint = "http://127.0.0.1:1"
access_key_id = "test"
secret_access_key = "test"
`, natsName, sqsName, queue)
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestSourcesOfARunningServer(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			q := queueName(t)
			natsName, sqsName := "audit."+randomSuffix(), "invoices."+randomSuffix()
			store, schema := b.store(t)
			s := startServer(t, store, "--config", sourcesConfig(t, natsName, sqsName, q))
			s.schema = schema
			t.Cleanup(s.stop)
			c := newClient(t, s.url)

			all, err := c.ListSources(ctx)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			if len(all) != 2 || all[0].Name != natsName || all[1].Name != sqsName { // by name: audit…, invoices…
				t.Fatalf("listed %+v", all)
			}
			if all[0].Kind != rdq.SourceNATS || all[0].Queue != q || all[1].Kind != rdq.SourceSQS || all[1].Queue != q {
				t.Fatalf("listed %+v", all)
			}
			for _, st := range all {
				if st.Paused || st.Ingested != 0 || st.Dead != 0 || st.Duplicates != 0 || st.Rate != 0 || st.Lag != nil || st.Partitions == nil {
					t.Fatalf("a source that never connected: %+v", st)
				}
			}
			// SQS keeps no cursor on any store.
			if all[1].CursorsInStore {
				t.Fatalf("an SQS source with cursors in the store: %+v", all[1])
			}

			// The NATS source cannot connect: it shows its error and tries again.
			before := time.Now().Add(-time.Minute)
			deadline := time.Now().Add(60 * time.Second)
			var st rdq.SourceStatus
			for {
				st, err = c.GetSource(ctx, natsName)
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if st.LastError != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the NATS source never showed an error: %+v", st)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if st.Name != natsName || st.Kind != rdq.SourceNATS || st.Queue != q ||
				(st.State != rdq.SourceRetrying && st.State != rdq.SourceStarting) ||
				!strings.Contains(st.LastError, natsName) ||
				st.LastErrorAt.Before(before) || st.LastErrorAt.After(time.Now().Add(time.Minute)) {
				t.Fatalf("got %+v", st)
			}
			sqs, err := c.GetSource(ctx, sqsName)
			if err != nil || sqs.Name != sqsName || sqs.Kind != rdq.SourceSQS || sqs.Queue != q {
				t.Fatalf("get the SQS source: %+v %v", sqs, err)
			}

			_, err = c.GetSource(ctx, "no-such-source")
			var e *rdq.Error
			if !errors.As(err, &e) || e.Code != rdq.CodeSourceNotFound || e.Status != 404 {
				t.Fatalf("an unknown source: %#v", err)
			}

			// These stores keep cursors; these sources have none yet. A
			// source the server does not run can be reset too.
			for _, name := range []string{natsName, sqsName, "no-such-source"} {
				deleted, err := c.ResetSourceCursors(ctx, name)
				if err != nil || deleted != 0 {
					t.Fatalf("reset %s: %d %v", name, deleted, err)
				}
			}
			if st, err := c.GetSource(ctx, natsName); err != nil || st.Name != natsName {
				t.Fatalf("get after the reset: %+v %v", st, err)
			}
		})
	}
}
