package rdq

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// QueueConfig reads a queue's live policy with defaults filled in
// (GET /v1/queues/{q}/config, admin). Fields: docs/configuration.md.
func (c *Client) QueueConfig(ctx context.Context, queue string) (json.RawMessage, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return nil, localError(err)
	}
	var out json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/queues/"+escape(queue)+"/config", nil, &out)
	return out, err
}

// SetQueueConfig applies a partial policy document: the fields given
// replace the current ones (PUT /v1/queues/{q}/config, admin). It answers
// the resulting policy.
func (c *Client) SetQueueConfig(ctx context.Context, queue string, patch any) (json.RawMessage, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return nil, localError(err)
	}
	var out json.RawMessage
	_, err := c.do(ctx, http.MethodPut, "/v1/queues/"+escape(queue)+"/config", patch, &out)
	return out, err
}

// QueueCounts is one queue's task counts.
type QueueCounts struct {
	Queue     string `json:"queue"`
	Pending   int64  `json:"pending"`
	InFlight  int64  `json:"in_flight"`
	Succeeded int64  `json:"succeeded"`
	Dead      int64  `json:"dead"`
}

// Queues lists the queues with their counts (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) ([]QueueCounts, error) {
	var out struct {
		Queues []QueueCounts `json:"queues"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, &out)
	return out.Queues, err
}

// QueueFlow is a queue's flow-control state (GET /v1/queues/{q}/flow): its
// limits, the rate tokens left, the whole-queue throttle, the tasks in
// flight, the busiest and the throttled flow keys (at most 20), and how many
// claims the limits have cut short. See docs/flow-control.md.
type QueueFlow struct {
	Queue           string          `json:"queue"`
	Limits          json.RawMessage `json:"limits"`
	Tokens          *float64        `json:"tokens"`
	BlockedUntil    *time.Time      `json:"blocked_until"`
	InFlight        int64           `json:"in_flight"`
	Keys            []FlowKeyStatus `json:"keys"`
	ThrottledClaims int64           `json:"throttled_claims"`
}

// FlowKeyStatus is one flow key's state within its queue.
type FlowKeyStatus struct {
	Key          string     `json:"key"`
	InFlight     int64      `json:"in_flight"`
	Tokens       *float64   `json:"tokens"`
	BlockedUntil *time.Time `json:"blocked_until"`
}

// QueueFlow reads a queue's flow-control state (any scope on the queue).
func (c *Client) QueueFlow(ctx context.Context, queue string) (QueueFlow, error) {
	var out QueueFlow
	if err := envelope.ValidateQueueName(queue); err != nil {
		return out, localError(err)
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/queues/"+escape(queue)+"/flow", nil, &out)
	return out, err
}

// Throttle holds a flow key (flowKey != "") or the whole queue (flowKey ==
// "") back for d, on every worker and node (POST /v1/queues/{q}/throttle,
// admin): nothing it covers is claimed before then. A later throttle is
// never shortened by an earlier end. d is whole milliseconds from 1 ms to 7
// days. It answers the queue's flow state after the throttle.
func (c *Client) Throttle(ctx context.Context, queue, flowKey string, d time.Duration) (QueueFlow, error) {
	return c.throttle(ctx, queue, flowKey, map[string]any{"for_ms": d.Milliseconds()})
}

// ThrottleUntil is Throttle until t (in the future, within 7 days; else
// INVALID_FIELD naming until).
func (c *Client) ThrottleUntil(ctx context.Context, queue, flowKey string, t time.Time) (QueueFlow, error) {
	return c.throttle(ctx, queue, flowKey, map[string]any{"until": t.UTC().Format(time.RFC3339Nano)})
}

func (c *Client) throttle(ctx context.Context, queue, flowKey string, body map[string]any) (QueueFlow, error) {
	var out QueueFlow
	if err := envelope.ValidateQueueName(queue); err != nil {
		return out, localError(err)
	}
	if flowKey != "" {
		if err := envelope.ValidateFlowKey(flowKey); err != nil {
			return out, localError(err)
		}
		body["flow_key"] = flowKey
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+escape(queue)+"/throttle", body, &out)
	return out, err
}
