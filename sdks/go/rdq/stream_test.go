package rdq_test

// Tests of the Work stream itself: what the worker does with what a server
// sends, how it falls back to HTTP, TLS and tokens on both transports.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
	"rdq.dev/sdk/go/rdq"
)

// watchWork is a stream interceptor that shows the Work stream's traffic:
// sent sees each WorkRequest as it goes, acked each WorkAck before the
// worker reads it (and whether it answers an extension). Either may be nil.
func watchWork(sent func(*rdqpb.WorkRequest), acked func(ack *rdqpb.WorkAck, extension bool)) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &watchedStream{ClientStream: s, sent: sent, acked: acked, extensions: map[uint64]bool{}}, nil
	}
}

type watchedStream struct {
	grpc.ClientStream
	sent       func(*rdqpb.WorkRequest)
	acked      func(*rdqpb.WorkAck, bool)
	mu         sync.Mutex
	extensions map[uint64]bool // seqs of the extensions sent
}

func (s *watchedStream) SendMsg(m any) error {
	if req, ok := m.(*rdqpb.WorkRequest); ok {
		if x := req.GetExtend(); x != nil {
			s.mu.Lock()
			s.extensions[x.GetSeq()] = true
			s.mu.Unlock()
		}
		if s.sent != nil {
			s.sent(req)
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*rdqpb.WorkResponse); ok && err == nil && s.acked != nil {
		if ack := resp.GetAck(); ack != nil {
			s.mu.Lock()
			extension := s.extensions[ack.GetSeq()]
			s.mu.Unlock()
			s.acked(ack, extension)
		}
	}
	return err
}

// fakeWorkers is a Workers service that speaks the Work stream as a newer
// server might: before each task it sends a message of a kind this SDK does
// not know, and it sends what tasks is told to. It acks every settle.
type fakeWorkers struct {
	rdqpb.UnimplementedWorkersServer
	tasks   []*rdqpb.LeasedTask
	hellos  chan *rdqpb.WorkHello
	settles chan *rdqpb.SettleRequest
	credits chan uint32
}

func (f *fakeWorkers) Work(stream rdqpb.Workers_WorkServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	f.hellos <- req.GetHello()
	for _, task := range f.tasks {
		// Field 15 of WorkResponse, unknown here: a message naming a task.
		notice := &rdqpb.WorkResponse{}
		inner := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), task.GetId())
		notice.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 15, protowire.BytesType), inner))
		if err := stream.Send(notice); err != nil {
			return err
		}
		if err := stream.Send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: task}}); err != nil {
			return err
		}
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // the worker closed the stream
		}
		if c := req.GetCredit(); c != nil {
			f.credits <- c.GetCredits()
		}
		if s := req.GetSettle(); s != nil {
			ack := &rdqpb.WorkAck{Seq: s.GetSeq()}
			for _, item := range s.GetSettles() {
				f.settles <- item
				ack.Results = append(ack.Results, &rdqpb.SettleItemResult{Id: item.GetId()})
			}
			if err := stream.Send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Ack{Ack: ack}}); err != nil {
				return err
			}
		}
	}
}

// serveFake serves service on a loopback port until the test ends; its URL.
func serveFake(t testing.TB, service rdqpb.WorkersServer) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rdqpb.RegisterWorkersServer(srv, service)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

// leasedTask is a task as a server hands it out: IN_FLIGHT, one open attempt.
func leasedTask(handler string, payload []byte) *rdqpb.LeasedTask {
	now := time.Now()
	started := envelope.FormatTimestamp(now)
	leaseEnd := envelope.FormatTimestamp(now.Add(30 * time.Second))
	id := envelope.NewID()
	return &rdqpb.LeasedTask{Id: id, LeaseToken: "token-" + id, Envelope: &rdqpb.Envelope{
		EnvelopeVersion: 1, Id: id, Queue: "fake", HandlerRef: handler,
		Payload: payload, PayloadContentType: "application/json",
		Status: rdqpb.Status_IN_FLIGHT, AttemptCount: 1, ClaimCount: 1,
		LeaseExpiresAt: &leaseEnd, CreatedAt: started,
		Attempts: []*rdqpb.AttemptRecord{{AttemptNo: 1, StartedAt: started}},
		Omitted:  []string{"payload_ref"},
	}}
}

func TestMessagesOfKindsTheWorkerDoesNotKnowAreSkipped(t *testing.T) {
	bad := leasedTask("add", []byte(`{"n":1}`))
	bad.Envelope.CreatedAt = "yesterday" // does not map onto an envelope
	good := leasedTask("add", []byte(`{"n":41}`))
	fake := &fakeWorkers{
		tasks:  []*rdqpb.LeasedTask{bad, good},
		hellos: make(chan *rdqpb.WorkHello, 1), settles: make(chan *rdqpb.SettleRequest, 4), credits: make(chan uint32, 4),
	}
	c := newClient(t, serveFake(t, fake))
	type args struct {
		N int `json:"n"`
	}
	got := make(chan int, 2)
	reg := rdq.NewRegistry()
	reg.Register("add", rdq.JSONHandler(func(ctx context.Context, a args, task envelope.Envelope) error {
		got <- a.N + 1
		return nil
	}))
	var mu sync.Mutex
	var reported []error
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg, Concurrency: 8,
		OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})

	if h := <-fake.hellos; h.GetCredits() != 8 || !h.GetBareAcks() || len(h.GetQueues()) != 1 {
		t.Fatalf("hello %v", h)
	}
	// The task that does not map onto an envelope is not run; its credit comes back.
	if n := <-fake.credits; n != 1 {
		t.Fatalf("credit %d", n)
	}
	if n := <-got; n != 42 {
		t.Fatalf("the handler saw %d", n)
	}
	s := <-fake.settles
	if s.GetId() != good.GetId() || s.GetLeaseToken() != good.GetLeaseToken() || s.GetOutcome() != rdqpb.ReportedOutcome_REPORTED_SUCCESS {
		t.Fatalf("settle %v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || rdq.ErrorCode(reported[0]) != string(envelope.CodeMalformedEnvelope) || !strings.Contains(reported[0].Error(), bad.GetId()) {
		t.Fatalf("reported %v", reported)
	}
}

// errorsOf collects a worker's OnError reports; wanted receives the first
// that match says is the one waited for.
func errorsOf(match func(error) bool) (func(error), <-chan error) {
	wanted := make(chan error, 1)
	return func(err error) {
		if match(err) {
			select {
			case wanted <- err:
			default:
			}
		}
	}, wanted
}

func TestAnAutoWorkerFallsBackToHTTPWhenTheServerOffersNoGRPC(t *testing.T) {
	s := startServer(t, t.TempDir()+"/data")
	t.Cleanup(s.stop)
	c := newClient(t, s.url)

	// In front of the server: a proxy that speaks HTTP/1 only, and one
	// that speaks gRPC but has no Workers service.
	http1 := proxyTo(t, s.url, func(*http.Request, []byte) {})
	noWorkers := grpc.NewServer()
	target, _ := neturl.Parse(s.url)
	forward := httputil.NewSingleHostReverseProxy(target)
	front := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			noWorkers.ServeHTTP(w, r)
			return
		}
		forward.ServeHTTP(w, r)
	})}
	front.Protocols = new(http.Protocols)
	front.Protocols.SetHTTP1(true)
	front.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { _ = front.Close() })

	for _, tc := range []struct{ name, url string }{
		{"http1-only", http1.URL},
		{"unimplemented", "http://" + ln.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := queueName(t)
			reg := rdq.NewRegistry()
			reg.Register("h", func(ctx context.Context, task envelope.Envelope) error { return nil })

			// TransportGRPC does not fall back: it reports the failure and tries again.
			stuck := submit(t, c, rdq.Task{Queue: q, HandlerRef: "h"}).ID
			onError, failed := errorsOf(func(err error) bool { return strings.Contains(err.Error(), "Work stream") })
			w, err := rdq.NewWorker(newClient(t, tc.url), rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{q}, Registry: reg,
				PollInterval: 20 * time.Millisecond, OnError: onError})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			err = <-failed
			stop()
			<-done
			if tc.name == "unimplemented" && status.Code(errors.Unwrap(err)) != codes.Unimplemented {
				t.Fatalf("reported %v", err)
			}
			if env, _ := c.Get(context.Background(), stuck); env.Status != envelope.StatusPending || env.ClaimCount != 0 {
				t.Fatalf("a gRPC-only worker claimed through %s: %s", tc.name, env.Status)
			}

			// TransportAuto works over HTTP instead, and says so.
			onError, fellBack := errorsOf(func(err error) bool { return strings.Contains(err.Error(), "working over HTTP") })
			runWorker(t, newClient(t, tc.url), rdq.WorkerConfig{Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond, OnError: onError})
			<-fellBack
			waitFor(t, c, stuck, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		})
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// answers their paths and a pool trusting the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLSAndBearerTokensOnBothTransports(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := filepath.Join(dir, "rdq.toml")
	if err := os.WriteFile(cfg, []byte(`[[tokens]]
name = "go-sdk-worker"
token = "a-long-enough-secret-token"
scopes = ["submit", "work", "admin"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), "--config", cfg, "--tls-cert", certFile, "--tls-key", keyFile)
	t.Cleanup(s.stop)
	trust := &tls.Config{RootCAs: pool}
	authed := newClientWith(t, rdq.ClientConfig{URL: s.url, Token: "a-long-enough-secret-token", TLSConfig: trust})

	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			q := queueName(t)
			reg := rdq.NewRegistry()
			reg.Register("h", func(ctx context.Context, task envelope.Envelope) error { return nil })
			id := submit(t, authed, rdq.Task{Queue: q, HandlerRef: "h"}).ID

			// Without a token the worker is refused, and says why.
			onError, refused := errorsOf(func(err error) bool { return rdq.ErrorCode(err) != "" })
			anon := newClientWith(t, rdq.ClientConfig{URL: s.url, TLSConfig: trust})
			w, err := rdq.NewWorker(anon, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond, OnError: onError})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			err = <-refused
			stop()
			<-done
			if rdq.ErrorCode(err) != rdq.CodeUnauthenticated {
				t.Fatalf("without a token: %v", err)
			}

			// With the token, over TLS checked against the test's certificate.
			runWorker(t, authed, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond,
				OnError: func(err error) { t.Errorf("worker: %v", err) }})
			waitFor(t, authed, id, "SUCCEEDED", func(e envelope.Envelope) bool { return e.Status == envelope.StatusSucceeded })
		})
	}

	// A certificate the client does not trust fails the stream's handshake.
	onError, failed := errorsOf(func(err error) bool { return strings.Contains(err.Error(), "certificate") })
	untrusting := newClientWith(t, rdq.ClientConfig{URL: s.url, Token: "a-long-enough-secret-token"})
	w, err := rdq.NewWorker(untrusting, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"q"}, Registry: rdq.NewRegistry(), OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-failed
	stop()
	<-done
}

// stackError supplies the stack recorded with it.
type stackError struct{ msg string }

func (e *stackError) Error() string { return e.msg }
func (e *stackError) Stack() string { return "frame one\nframe two" }

// What a handler sees is the envelope the server stores, byte for byte,
// whichever transport brought it: headers, priority, versions, a failed
// attempt's detail (numbers exact) and stack.
func TestAHandlerSeesTheStoredEnvelopeOnEitherTransport(t *testing.T) {
	forEachStoreAndTransport(t, func(t *testing.T, c *rdq.Client, url string, tr rdq.Transport) {
		q := queueName(t)
		configure(t, c, q, map[string]any{"max_priority": 9, "backoff": map[string]any{"kind": "none"}})
		compared := make(chan string, 1)
		reg := rdq.NewRegistry()
		reg.Register("h", func(ctx context.Context, task envelope.Envelope) error {
			if task.AttemptCount == 1 {
				return &stackError{"first attempt"}
			}
			stored, err := c.Get(ctx, task.ID)
			if err != nil {
				compared <- err.Error()
				return nil
			}
			seen, _ := task.Encode()
			want, _ := stored.Encode()
			if string(seen) != string(want) {
				compared <- fmt.Sprintf("the handler saw\n%s\nthe server stores\n%s", seen, want)
				return nil
			}
			if len(task.Attempts) != 2 || task.Attempts[0].Error == nil || task.Attempts[0].Error.Stack == nil ||
				string(task.Attempts[0].Error.Detail) != `{"big":123456789012345678901234567890,"e":1e+5,"s":"é\n"}` {
				compared <- fmt.Sprintf("the first attempt is not the one recorded: %s", seen)
				return nil
			}
			compared <- ""
			return nil
		}, rdq.WithOutcomeMapper(func(ret any, err error) rdq.Outcome {
			if err == nil {
				return rdq.Success()
			}
			return rdq.RetryableFailure(err).WithType("app.First").
				WithDetail(json.RawMessage(`{"big":123456789012345678901234567890,"e":1E5,"s":"é\n"}`))
		}))
		runWorker(t, c, rdq.WorkerConfig{Transport: tr, Queues: []string{q}, Registry: reg, PollInterval: 20 * time.Millisecond})
		submit(t, c, rdq.Task{Queue: q, HandlerRef: "h", Payload: []byte{0, 1, 2, 255}, Priority: 7,
			HandlerVersion: "v2", FlowKey: "tenant:42", CorrelationID: "corr-1",
			Headers: map[string]string{"x-note": "ünïcode", "traceparent": newTraceParent(t)}})
		if diff := <-compared; diff != "" {
			t.Fatal(diff)
		}
	})
}

// brokenFirstStream ends its first Work stream with an error right after
// handing out one task; later streams hand out nothing and report what
// they are sent.
type brokenFirstStream struct {
	rdqpb.UnimplementedWorkersServer
	task    *rdqpb.LeasedTask
	calls   atomic.Int32
	hellos  chan *rdqpb.WorkHello
	settles chan *rdqpb.SettleRequest
	credits chan uint32
}

func (f *brokenFirstStream) Work(stream rdqpb.Workers_WorkServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	f.hellos <- req.GetHello()
	if f.calls.Add(1) == 1 {
		if err := stream.Send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Task{Task: f.task}}); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "the node is going away")
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if c := req.GetCredit(); c != nil {
			f.credits <- c.GetCredits()
		}
		if s := req.GetSettle(); s != nil {
			ack := &rdqpb.WorkAck{Seq: s.GetSeq()}
			for _, item := range s.GetSettles() {
				f.settles <- item
				ack.Results = append(ack.Results, &rdqpb.SettleItemResult{Id: item.GetId()})
			}
			if err := stream.Send(&rdqpb.WorkResponse{Kind: &rdqpb.WorkResponse_Ack{Ack: ack}}); err != nil {
				return err
			}
		}
	}
}

func TestAStreamThatBreaksIsOpenedAgainAndItsTasksSettleOnTheNext(t *testing.T) {
	fake := &brokenFirstStream{task: leasedTask("h", nil),
		hellos: make(chan *rdqpb.WorkHello, 4), settles: make(chan *rdqpb.SettleRequest, 4), credits: make(chan uint32, 4)}
	c := newClient(t, serveFake(t, fake))
	release := make(chan struct{})
	reg := rdq.NewRegistry()
	reg.Register("h", func(ctx context.Context, task envelope.Envelope) error {
		<-release // until the next stream is open
		return nil
	})
	onError, broke := errorsOf(func(err error) bool { return status.Code(errors.Unwrap(err)) == codes.Unavailable })
	runWorker(t, c, rdq.WorkerConfig{Transport: rdq.TransportGRPC, Queues: []string{"fake"}, Registry: reg,
		Concurrency: 4, PollInterval: 20 * time.Millisecond, OnError: onError})

	if h := <-fake.hellos; h.GetCredits() != 4 {
		t.Fatalf("first hello: %v", h)
	}
	<-broke
	// The task of the broken stream still holds its slot.
	if h := <-fake.hellos; h.GetCredits() != 3 {
		t.Fatalf("second hello: %v", h)
	}
	close(release)
	if s := <-fake.settles; s.GetId() != fake.task.GetId() || s.GetOutcome() != rdqpb.ReportedOutcome_REPORTED_SUCCESS {
		t.Fatalf("settle %v", s)
	}
	// Its settle gives the new stream no credit back, so the worker adds one.
	if n := <-fake.credits; n != 1 {
		t.Fatalf("credit %d", n)
	}
}
