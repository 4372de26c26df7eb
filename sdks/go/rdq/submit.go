package rdq

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/internal/rdqpb"
)

// Task is what a caller submits: the client subset of the envelope. The
// server assigns the id, status and timestamps.
type Task struct {
	Queue      string
	HandlerRef string
	// Payload is opaque bytes; ContentType defaults to application/octet-stream.
	Payload     []byte
	ContentType string
	// Headers are user headers; no key may start with "rdq." in any case
	// (RESERVED_HEADER, refused before any request is made).
	Headers        map[string]string
	HandlerVersion string
	// Priority: higher is claimed first; at most the queue's max_priority.
	Priority uint8
	// Delay makes the task due this long after the submit (millisecond precision).
	Delay time.Duration
	// IdempotencyKey: a second submit with the same key to the same queue
	// answers the first task (Submitted.Existing).
	IdempotencyKey string
	// FlowKey: the queue's per-key limits and fairness count tasks by it
	// (docs/flow-control.md): a tenant, an account, a host. 1–128 bytes of
	// [A-Za-z0-9._:/@=+-]; stored as the system header rdq.flow_key.
	FlowKey string
	// CorrelationID is stored in the user header "correlation-id" (the HTTP
	// API cannot set the system header rdq.correlation_id) and read back by
	// Envelope.CorrelationID.
	CorrelationID string
	// Unique, when not nil, makes the submit unique (docs/uniqueness.md): a
	// submit of a key another task holds fails with CodeUniqueHeld and the
	// holder's id in Error.Holder, or replaces a waiting holder's payload
	// (OnConflictReplace, OnConflictDebounce), or answers the holder
	// (OnConflictExisting).
	Unique *Unique
}

// Submitted is a submit's answer.
type Submitted struct {
	Envelope envelope.Envelope
	// Existing is true when the idempotency key matched an earlier task, or
	// a unique submit replaced a waiting holder (OnConflictReplace,
	// OnConflictDebounce) or met one (OnConflictExisting): Envelope is then
	// that task.
	Existing bool
}

type submitRequest struct {
	Queue              string            `json:"queue"`
	HandlerRef         string            `json:"handler_ref"`
	Payload            string            `json:"payload"`
	PayloadContentType string            `json:"payload_content_type,omitempty"`
	Headers            map[string]string `json:"headers,omitempty"`
	HandlerVersion     string            `json:"handler_version,omitempty"`
	Priority           uint8             `json:"priority,omitempty"`
	DelayMs            int64             `json:"delay_ms,omitempty"`
	IdempotencyKey     string            `json:"idempotency_key,omitempty"`
	FlowKey            string            `json:"flow_key,omitempty"`
	Unique             *uniqueRequest    `json:"unique,omitempty"`
}

// check refuses, before any request, what the server would refuse for sure.
func (t *Task) check() error {
	if err := envelope.ValidateQueueName(t.Queue); err != nil {
		return localError(err)
	}
	if err := envelope.ValidateHandlerRef(t.HandlerRef); err != nil {
		return localError(err)
	}
	if err := envelope.ValidateUserHeaders(t.Headers); err != nil {
		return localError(err)
	}
	if t.FlowKey != "" {
		if err := envelope.ValidateFlowKey(t.FlowKey); err != nil {
			return localError(err)
		}
	}
	if t.Delay < 0 {
		return &Error{Code: CodeInvalidField, Field: "delay_ms", Detail: "the delay must not be negative"}
	}
	if t.Unique != nil {
		return t.Unique.check()
	}
	return nil
}

// headers are the task's user headers with its correlation id.
func (t *Task) headers() map[string]string {
	if t.CorrelationID == "" {
		return t.Headers
	}
	headers := make(map[string]string, len(t.Headers)+1)
	for k, v := range t.Headers {
		headers[k] = v
	}
	headers[envelope.CorrelationHeader] = t.CorrelationID
	return headers
}

func (t *Task) request() submitRequest {
	return submitRequest{
		Queue:              t.Queue,
		HandlerRef:         t.HandlerRef,
		Payload:            base64.StdEncoding.EncodeToString(t.Payload),
		PayloadContentType: t.ContentType,
		Headers:            t.headers(),
		HandlerVersion:     t.HandlerVersion,
		Priority:           t.Priority,
		DelayMs:            t.Delay.Milliseconds(),
		IdempotencyKey:     t.IdempotencyKey,
		FlowKey:            t.FlowKey,
		Unique:             t.Unique.request(),
	}
}

// proto is the task as a gRPC SubmitRequest; empty optional fields are
// unset, as the JSON body omits them.
func (t *Task) proto() *rdqpb.SubmitRequest {
	return &rdqpb.SubmitRequest{
		Queue:              t.Queue,
		HandlerRef:         t.HandlerRef,
		HandlerVersion:     optional(t.HandlerVersion),
		Payload:            t.Payload,
		PayloadContentType: optional(t.ContentType),
		Headers:            t.headers(),
		DelayMs:            uint64(t.Delay.Milliseconds()),
		Priority:           uint32(t.Priority),
		IdempotencyKey:     optional(t.IdempotencyKey),
		FlowKey:            optional(t.FlowKey),
		Unique:             t.Unique.proto(),
	}
}

// Submit submits one task (POST /v1/tasks, or Tasks/Submit with
// ClientConfig.SubmitTransport TransportGRPC). The task joins the trace of
// ctx (see ClientConfig.TraceParent and ContextWithTraceParent) unless its
// Headers set "traceparent" themselves, which then wins.
func (c *Client) Submit(ctx context.Context, t Task) (Submitted, error) {
	if err := t.check(); err != nil {
		return Submitted{}, err
	}
	return c.submit(ctx, t, c.traceParentFor(ctx))
}

// submit sends one checked task; traceparent, when not empty and the
// task's headers have none, goes in the traceparent request header (gRPC:
// metadata), which the server copies into the envelope's headers
// (docs/http-api.md).
func (c *Client) submit(ctx context.Context, t Task, traceparent string) (Submitted, error) {
	if c.submitGRPC {
		return c.submitOverGRPC(ctx, t, traceparent)
	}
	var header http.Header
	if _, own := t.Headers[TraceParentHeader]; !own && traceparent != "" {
		header = http.Header{}
		header.Set(TraceParentHeader, traceparent)
	}
	var env envelope.Envelope
	status, err := c.doWithHeader(ctx, http.MethodPost, "/v1/tasks", t.request(), header, &env)
	if err != nil {
		return Submitted{}, err
	}
	return Submitted{Envelope: env, Existing: status == http.StatusOK}, nil
}

// submitOverGRPC is submit on Tasks/Submit.
func (c *Client) submitOverGRPC(ctx context.Context, t Task, traceparent string) (Submitted, error) {
	conn, err := c.conn()
	if err != nil {
		return Submitted{}, err
	}
	callCtx := c.outgoing(ctx)
	if _, own := t.Headers[TraceParentHeader]; !own && traceparent != "" {
		callCtx = metadata.AppendToOutgoingContext(callCtx, TraceParentHeader, traceparent)
	}
	resp, err := rdqpb.NewTasksClient(conn).Submit(callCtx, t.proto())
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Submitted{}, fmt.Errorf("rdq: Tasks/Submit: %w", ctxErr)
		}
		return Submitted{}, statusError("Tasks/Submit", err)
	}
	env, err := envelopeFromProto(resp.GetEnvelope())
	if err != nil {
		return Submitted{}, fmt.Errorf("rdq: the answer to Tasks/Submit: %w", err)
	}
	return Submitted{Envelope: env, Existing: !resp.GetCreated()}, nil
}

// SubmitResult is one task's answer in a batch.
type SubmitResult struct {
	Submitted
	Err error
}

// SubmitBatchConcurrency is how many submits SubmitBatch keeps in flight.
const SubmitBatchConcurrency = 16

// SubmitBatch submits many tasks and answers one result per task, in order;
// a refused task does not stop the others. It issues single submits
// (POST /v1/tasks, or Tasks/Submit with ClientConfig.SubmitTransport
// TransportGRPC), SubmitBatchConcurrency at a time: the tasks are not
// submitted atomically, nor decided in order (of two tasks with one unique
// key, either may be the holder; the other fails with CodeUniqueHeld naming
// it). Tasks the client refuses itself (a reserved header, a bad name) fail
// without a request. Every task joins the trace of ctx as in Submit (the
// trace context is read once).
func (c *Client) SubmitBatch(ctx context.Context, tasks []Task) []SubmitResult {
	results := make([]SubmitResult, len(tasks))
	traceparent := c.traceParentFor(ctx)
	sem := make(chan struct{}, SubmitBatchConcurrency)
	var wg sync.WaitGroup
	for i := range tasks {
		if err := tasks[i].check(); err != nil {
			results[i].Err = err
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].Err = ctx.Err()
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			results[i].Submitted, results[i].Err = c.submit(ctx, tasks[i], traceparent)
		}(i)
	}
	wg.Wait()
	return results
}

// Get reads a task's envelope with its attempt history (GET /v1/tasks/{id}).
func (c *Client) Get(ctx context.Context, id string) (envelope.Envelope, error) {
	if id == "" {
		return envelope.Envelope{}, errEmptyID
	}
	var env envelope.Envelope
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+escape(id), nil, &env)
	return env, err
}

// Delete removes a task (DELETE /v1/tasks/{id}, admin).
func (c *Client) Delete(ctx context.Context, id string) error {
	if id == "" {
		return errEmptyID
	}
	_, err := c.do(ctx, http.MethodDelete, "/v1/tasks/"+escape(id), nil, nil)
	return err
}
