package rdq

import (
	"context"
	"encoding/json"
	"net/http"

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
