package rdq_test

// Sources without a server: the answers of /v1/sources decoded from canned
// JSON, errors, and what the client refuses before any request.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/rdq"
)

// documentedSource is the example of docs/sources.md ("Status"), with
// members this client does not know, at every level.
const documentedSource = `{"name":"orders","kind":"kafka","queue":"orders","state":"retrying","paused":false,"lag":12,"ingested":48210,"dead":1,"duplicates":3,"rate":812.4,"last_error":"source orders: the topic orders does not exist on kafka-1:9092","last_error_at_ms":1767225600123,"cursors_in_store":true,"partitions":[{"partition":"0","cursor":16070,"lag":4,"leader":3},{"partition":"1","cursor":null,"lag":null}],"future_field":{"a":[1,2]}}`

// fresh is a source nothing is measured of yet.
const freshSource = `{"name":"inv.sqs","kind":"sqs","queue":"invoices","state":"starting","paused":false,"lag":null,"ingested":0,"dead":0,"duplicates":0,"rate":0.0,"last_error":null,"last_error_at_ms":null,"cursors_in_store":false,"partitions":[]}`

func u64(v uint64) *uint64 { return &v }

var wantDocumented = rdq.SourceStatus{
	Name: "orders", Kind: rdq.SourceKafka, Queue: "orders", State: rdq.SourceRetrying, Lag: u64(12),
	Ingested: 48210, Dead: 1, Duplicates: 3, Rate: 812.4,
	LastError:      "source orders: the topic orders does not exist on kafka-1:9092",
	LastErrorAt:    time.UnixMilli(1767225600123).UTC(),
	CursorsInStore: true,
	Partitions: []rdq.SourcePartition{
		{Partition: "0", Cursor: u64(16070), Lag: u64(4)},
		{Partition: "1"},
	},
}

var wantFresh = rdq.SourceStatus{Name: "inv.sqs", Kind: rdq.SourceSQS, Queue: "invoices", State: rdq.SourceStarting,
	Partitions: []rdq.SourcePartition{}}

func TestASourceStatusReadsTheDocumentedJSON(t *testing.T) {
	var st rdq.SourceStatus
	if err := json.Unmarshal([]byte(documentedSource), &st); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st, wantDocumented) {
		t.Fatalf("read\n%+v\nwant\n%+v", st, wantDocumented)
	}
	var fresh rdq.SourceStatus
	if err := json.Unmarshal([]byte(freshSource), &fresh); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh, wantFresh) {
		t.Fatalf("read %+v", fresh)
	}
	// It writes what it read, without the members it does not know.
	out, err := json.Marshal(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"name":"inv.sqs","kind":"sqs","queue":"invoices","state":"starting","paused":false,"lag":null,"ingested":0,"dead":0,"duplicates":0,"rate":0,"last_error":null,"last_error_at_ms":null,"cursors_in_store":false,"partitions":[]}` {
		t.Fatalf("wrote %s", out)
	}
	out, err = json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back rdq.SourceStatus
	if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, wantDocumented) {
		t.Fatalf("wrote %s, read back %+v (%v)", out, back, err)
	}
}

// request is what a canned server was asked.
type request struct{ method, path string }

// cannedServer answers each "METHOD path" with its status and body (404
// SOURCE_NOT_FOUND for any other), and records the requests.
func cannedServer(t *testing.T, answers map[string]struct {
	status int
	body   string
}) (*rdq.Client, func() []request) {
	var mu sync.Mutex
	var seen []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.EscapedPath()})
		mu.Unlock()
		a, ok := answers[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":"SOURCE_NOT_FOUND","detail":"no source \"nope\" runs in this server","status":404,"title":"Source not found","type":"urn:rdq:error:SOURCE_NOT_FOUND"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return newClient(t, srv.URL), func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), seen...)
	}
}

func TestTheSourceCallsDecodeTheServersAnswers(t *testing.T) {
	type answer = struct {
		status int
		body   string
	}
	c, requests := cannedServer(t, map[string]answer{
		"GET /v1/sources":                   {200, `{"sources":[` + freshSource + `,` + documentedSource + `],"next":"ignored"}`},
		"GET /v1/sources/orders":            {200, documentedSource},
		"DELETE /v1/sources/orders/cursors": {200, `{"name":"orders","deleted":6,"by":"ignored"}`},
	})
	ctx := context.Background()

	all, err := c.ListSources(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(all) != 2 || !reflect.DeepEqual(all[0], wantFresh) || !reflect.DeepEqual(all[1], wantDocumented) {
		t.Fatalf("listed %+v", all)
	}
	one, err := c.GetSource(ctx, "orders")
	if err != nil || !reflect.DeepEqual(one, wantDocumented) {
		t.Fatalf("get: %+v %v", one, err)
	}
	deleted, err := c.ResetSourceCursors(ctx, "orders")
	if err != nil || deleted != 6 {
		t.Fatalf("reset: %d %v", deleted, err)
	}

	_, err = c.GetSource(ctx, "nope")
	var e *rdq.Error
	if !errors.As(err, &e) || e.Code != rdq.CodeSourceNotFound || e.Status != http.StatusNotFound ||
		e.Detail != `no source "nope" runs in this server` || !rdq.IsCode(err, rdq.CodeSourceNotFound) {
		t.Fatalf("an unknown source: %#v", err)
	}
	if _, err := c.ResetSourceCursors(ctx, "nope"); !rdq.IsCode(err, rdq.CodeSourceNotFound) {
		t.Fatalf("an unknown source's reset: %v", err)
	}

	want := []request{
		{"GET", "/v1/sources"},
		{"GET", "/v1/sources/orders"},
		{"DELETE", "/v1/sources/orders/cursors"},
		{"GET", "/v1/sources/nope"},
		{"DELETE", "/v1/sources/nope/cursors"},
	}
	if got := requests(); !reflect.DeepEqual(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
}

func TestAnUnsupportedResetIsTheServersError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotImplemented)
		_, _ = io.WriteString(w, `{"code":"UNSUPPORTED","title":"Unsupported","detail":"the store keeps no source cursors","status":501}`)
	}))
	t.Cleanup(srv.Close)
	_, err := newClient(t, srv.URL).ResetSourceCursors(context.Background(), "orders")
	var e *rdq.Error
	if !errors.As(err, &e) || e.Code != rdq.CodeUnsupported || e.Status != http.StatusNotImplemented {
		t.Fatalf("%#v", err)
	}
}

func TestBadSourceNamesAreRefusedBeforeAnyRequest(t *testing.T) {
	c, requests := countingServer(t)
	ctx := context.Background()
	long := make([]byte, 121)
	for i := range long {
		long[i] = 'a'
	}
	for _, name := range []string{"", ".", "..", "Orders", "a/b", "a b", "é", string(long)} {
		for call, do := range map[string]func() error{
			"get":   func() error { _, err := c.GetSource(ctx, name); return err },
			"reset": func() error { _, err := c.ResetSourceCursors(ctx, name); return err },
		} {
			err := do()
			var e *rdq.Error
			if !errors.As(err, &e) || e.Code != rdq.CodeInvalidArgument || e.Field != "source" || e.Status != 0 {
				t.Errorf("%s %q: %v", call, name, err)
			}
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	// Names the server takes are sent: ".x", "..x", 120 characters.
	for _, name := range []string{".x", "..x", "a.b_c-1", string(long[:120])} {
		if _, err := c.GetSource(ctx, name); rdq.ErrorCode(err) != "HTTP_500" {
			t.Errorf("%q: %v", name, err)
		}
	}
	if n := requests.Load(); n != 4 {
		t.Fatalf("%d requests reached the server, want 4", n)
	}
}
