package rdq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// SourceKind is where a source reads records (docs/sources.md).
type SourceKind string

// The kinds of source.
const (
	SourceKafka SourceKind = "kafka" // a Kafka topic
	SourceNATS  SourceKind = "nats"  // a NATS JetStream stream
	SourceSQS   SourceKind = "sqs"   // an SQS queue
)

// SourceState is how a source stands (docs/sources.md#status).
type SourceState string

// The states of a source.
const (
	// SourceStarting: connecting, or reading its cursors.
	SourceStarting SourceState = "starting"
	// SourceRunning: reading.
	SourceRunning SourceState = "running"
	// SourcePaused: its queue went above its high-water mark and has not
	// yet fallen below its low-water mark (back-pressure).
	SourcePaused SourceState = "paused"
	// SourceRetrying: its last step failed; it tries again after a wait
	// (SourceStatus.LastError says why).
	SourceRetrying SourceState = "retrying"
	// SourceStopped: the server is shutting down.
	SourceStopped SourceState = "stopped"
)

// SourceStatus is a source the server runs (a `[[sources]]` table of its
// configuration file: a Kafka topic, a NATS JetStream stream or an SQS
// queue whose records become tasks) and how it stands, as that server
// process knows it: the counters count since it started. See
// docs/sources.md#status.
type SourceStatus struct {
	// Name is the source's name, 1–120 characters of [a-z0-9._-].
	Name string
	// Kind is where it reads: SourceKafka, SourceNATS or SourceSQS.
	Kind SourceKind
	// Queue is the queue its tasks go to.
	Queue string
	// State is how it stands.
	State SourceState
	// Paused is true while it does not read because of back-pressure.
	Paused bool
	// Lag is the records in the source not yet ingested, as last measured;
	// nil until measured.
	Lag *uint64
	// Ingested counts the records that became PENDING tasks, Dead those
	// kept as DEAD tasks (UNDECODABLE_SOURCE), Duplicates those skipped
	// because their task was already stored.
	Ingested, Dead, Duplicates uint64
	// Rate is records per second over the last 10 seconds.
	Rate float64
	// LastError is the last failure ("" for none) and LastErrorAt when it
	// happened (zero for none); both are kept after the source recovers.
	LastError   string
	LastErrorAt time.Time
	// CursorsInStore is true when the store keeps this source's cursors
	// (capability source_cursors).
	CursorsInStore bool
	// Partitions are its Kafka partitions or JetStream stream, where known
	// (for SQS one entry with an empty name).
	Partitions []SourcePartition
}

// SourcePartition is one partition of a source: a Kafka partition, a
// JetStream stream.
type SourcePartition struct {
	// Partition is a Kafka partition's number, a stream's name.
	Partition string `json:"partition"`
	// Cursor is the position of the next record to ingest; nil until known.
	Cursor *uint64 `json:"cursor"`
	// Lag is the records behind the newest; nil until measured.
	Lag *uint64 `json:"lag"`
}

// sourceStatusWire is the JSON form, field for field as the HTTP API
// writes it.
type sourceStatusWire struct {
	Name           string            `json:"name"`
	Kind           SourceKind        `json:"kind"`
	Queue          string            `json:"queue"`
	State          SourceState       `json:"state"`
	Paused         bool              `json:"paused"`
	Lag            *uint64           `json:"lag"`
	Ingested       uint64            `json:"ingested"`
	Dead           uint64            `json:"dead"`
	Duplicates     uint64            `json:"duplicates"`
	Rate           float64           `json:"rate"`
	LastError      *string           `json:"last_error"`
	LastErrorAtMs  *int64            `json:"last_error_at_ms"`
	CursorsInStore bool              `json:"cursors_in_store"`
	Partitions     []SourcePartition `json:"partitions"`
}

// UnmarshalJSON reads a source's status as the HTTP API writes it; members
// it does not know are ignored.
func (s *SourceStatus) UnmarshalJSON(data []byte) error {
	var w sourceStatusWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*s = SourceStatus{
		Name: w.Name, Kind: w.Kind, Queue: w.Queue, State: w.State, Paused: w.Paused, Lag: w.Lag,
		Ingested: w.Ingested, Dead: w.Dead, Duplicates: w.Duplicates, Rate: w.Rate,
		CursorsInStore: w.CursorsInStore, Partitions: w.Partitions,
	}
	if w.LastError != nil {
		s.LastError = *w.LastError
	}
	if w.LastErrorAtMs != nil {
		s.LastErrorAt = time.UnixMilli(*w.LastErrorAtMs).UTC()
	}
	return nil
}

// MarshalJSON writes a source's status as the HTTP API does.
func (s SourceStatus) MarshalJSON() ([]byte, error) {
	w := sourceStatusWire{
		Name: s.Name, Kind: s.Kind, Queue: s.Queue, State: s.State, Paused: s.Paused, Lag: s.Lag,
		Ingested: s.Ingested, Dead: s.Dead, Duplicates: s.Duplicates, Rate: s.Rate,
		CursorsInStore: s.CursorsInStore, Partitions: s.Partitions,
	}
	if s.LastError != "" {
		w.LastError = &s.LastError
	}
	if !s.LastErrorAt.IsZero() {
		ms := s.LastErrorAt.UnixMilli()
		w.LastErrorAtMs = &ms
	}
	if w.Partitions == nil {
		w.Partitions = []SourcePartition{}
	}
	return json.Marshal(w)
}

// checkSourceName refuses, before any request, a name the server would
// refuse (INVALID_ARGUMENT naming "source"): 1–120 characters of
// [a-z0-9._-], not "." or ".." (which no path can carry).
func checkSourceName(name string) error {
	ok := len(name) >= 1 && len(name) <= 120 && name != "." && name != ".."
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if ok {
		return nil
	}
	return &Error{Code: CodeInvalidArgument, Field: "source",
		Detail: fmt.Sprintf("a source name is 1 to 120 characters of [a-z0-9._-], not %q", name)}
}

func sourcePath(name string) string { return "/v1/sources/" + escape(name) }

// ListSources lists the sources the server runs on queues the caller may
// read, by name (GET /v1/sources).
func (c *Client) ListSources(ctx context.Context) ([]SourceStatus, error) {
	var out struct {
		Sources []SourceStatus `json:"sources"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/sources", nil, &out)
	return out.Sources, err
}

// GetSource reads one source with its status and partitions (GET
// /v1/sources/{name}, any scope on its queue). A name the server does not
// run, or whose queue the caller may not read, is SOURCE_NOT_FOUND; a name
// outside [a-z0-9._-]{1,120} is refused before any request.
func (c *Client) GetSource(ctx context.Context, name string) (SourceStatus, error) {
	if err := checkSourceName(name); err != nil {
		return SourceStatus{}, err
	}
	var out SourceStatus
	_, err := c.do(ctx, http.MethodGet, sourcePath(name), nil, &out)
	return out, err
}

// ResetSourceCursors removes every cursor the store keeps for the source
// (DELETE /v1/sources/{name}/cursors, admin on its queue; audited as
// source.reset) and answers how many there were: its next start takes its
// position from the source. Reset a source while no process runs it
// (docs/sources.md). A source the server does not run can be reset too
// (deleted is 0 when there were none); a store without source cursors
// (RabbitMQ) answers UNSUPPORTED.
func (c *Client) ResetSourceCursors(ctx context.Context, name string) (deleted uint64, err error) {
	if err := checkSourceName(name); err != nil {
		return 0, err
	}
	var out struct {
		Name    string `json:"name"`
		Deleted uint64 `json:"deleted"`
	}
	_, err = c.do(ctx, http.MethodDelete, sourcePath(name)+"/cursors", nil, &out)
	return out.Deleted, err
}
