// Package rdq is the Go SDK of rdq, a durable task queue: a Client that
// submits tasks (over HTTP or gRPC, ClientConfig.SubmitTransport; unique
// ones with Task.Unique) and operates the DLQ through `rdq serve`'s HTTP
// API, and a
// Worker that takes tasks on the gRPC Work stream (or by HTTP polling, the
// fallback), runs registered handlers (JSONHandler decodes a payload into a
// type of the handler's own), extends their leases while they run and
// settles their outcomes in batches.
//
// A handler returns an error; nil is SUCCESS and anything else is a failure
// classified by the outcome ladder (see Resolve and docs/sdk-go.md): an
// OutcomeMapper, then the per-call wrappers Permanent and Retryable, then the
// worker's classifiers, then the queue's non_retryable_errors globs (applied
// by the server), then retryable.
//
// Periodic schedules are managed with the Client (PutSchedule, ListSchedules,
// …) or declared in code on a Worker (WorkerConfig.Schedules): stored when
// the worker starts, with those code declared once and no longer reported
// by Worker.UndeclaredSchedules, never deleted. The scheduler of every
// `rdq serve` node fires them.
//
// The sources a server runs (Kafka topics, NATS JetStream streams and SQS
// queues whose records become tasks, declared in its configuration file)
// are read with ListSources and GetSource, and their cursors reset with
// ResetSourceCursors.
//
// Submits join the caller's W3C trace (ContextWithTraceParent, or a
// ClientConfig.TraceParent hook such as an OpenTelemetry propagator), and
// each handler's context carries its task's traceparent, so submits from a
// handler continue the task's trace.
package rdq
