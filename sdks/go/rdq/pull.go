package rdq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// The pull-worker calls the Worker is built on, exported for callers who run
// their own loop.

// ClaimedTask is a task held under a lease.
type ClaimedTask struct {
	ID         string            `json:"id"`
	LeaseToken string            `json:"lease_token"`
	Envelope   envelope.Envelope `json:"envelope"`
}

// Claim takes up to max due tasks of the queue, highest priority first
// (POST /v1/queues/{q}/claim). lease 0 uses the queue's lease_ms.
func (c *Client) Claim(ctx context.Context, queue string, max int, lease time.Duration) ([]ClaimedTask, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return nil, localError(err)
	}
	req := struct {
		Max     int   `json:"max"`
		LeaseMs int64 `json:"lease_ms,omitempty"`
	}{max, lease.Milliseconds()}
	var out struct {
		Tasks []ClaimedTask `json:"tasks"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+escape(queue)+"/claim", req, &out)
	return out.Tasks, err
}

// Settlement kinds as the settle API spells them.
const (
	SettleSuccess          = "SUCCESS"
	SettleRetryableFailure = "RETRYABLE_FAILURE"
	SettlePermanentFailure = "PERMANENT_FAILURE"
	// SettleFailure leaves the decision to the queue's non_retryable_errors
	// globs (retryable when none matches).
	SettleFailure = "FAILURE"
	SettleDefer   = "DEFER"
	SettleRelease = "RELEASE"
)

// SettleError is the error recorded with a failed attempt.
type SettleError struct {
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Detail  json.RawMessage `json:"detail,omitempty"`
	Stack   string          `json:"stack,omitempty"`
}

// Settle is one outcome report.
type Settle struct {
	ID         string       `json:"id"`
	LeaseToken string       `json:"lease_token"`
	Outcome    string       `json:"outcome"`
	Error      *SettleError `json:"error,omitempty"`
	DeferMs    *int64       `json:"defer_ms,omitempty"`
	// Throttle, with DEFER only: ThrottleScopeKey or ThrottleScopeQueue also holds the
	// task's flow key (or the whole queue) back until the deferral is due,
	// for every worker and node (see docs/flow-control.md).
	Throttle string `json:"throttle,omitempty"`
}

// The scopes a deferral may throttle (Settle.Throttle).
const (
	// ThrottleScopeKey throttles the task's flow key; the whole queue for a task
	// without one.
	ThrottleScopeKey = "key"
	// ThrottleScopeQueue throttles the whole queue.
	ThrottleScopeQueue = "queue"
)

// SettleResult is the answer for one settle of a batch: Err is nil and
// Envelope the updated task, or Err is an *Error (LEASE_LOST, …).
type SettleResult struct {
	ID       string
	Envelope envelope.Envelope
	Err      error
	// CancelRequested, in the answer to a lease extension on the Work
	// stream: a cancel was asked of the task while it ran (set even when
	// the answer carries no envelope).
	CancelRequested bool
}

// SettleBatch reports up to 1000 outcomes in one request (POST /v1/settle).
// Items are independent: one result per item, in order.
func (c *Client) SettleBatch(ctx context.Context, settles []Settle) ([]SettleResult, error) {
	return c.settleBatch(ctx, settles, true)
}

// settleStatus is what a worker needs of one settle result: the item's
// status and problem.
type settleStatus struct {
	ID     string `json:"id"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// settleBatch asks for the answered envelopes only when told to: a worker
// without a dead-letter hook only needs each item's status, and the server
// then leaves the envelopes out ("envelopes": false, docs/http-api.md).
func (c *Client) settleBatch(ctx context.Context, settles []Settle, envelopes bool) ([]SettleResult, error) {
	if !envelopes {
		// The server leaves the envelopes out of the answer.
		bare := false
		req := struct {
			Settles   []Settle `json:"settles"`
			Envelopes *bool    `json:"envelopes"`
		}{settles, &bare}
		var out struct {
			Results []settleStatus `json:"results"`
		}
		if _, err := c.do(ctx, http.MethodPost, "/v1/settle", req, &out); err != nil {
			return nil, err
		}
		results := make([]SettleResult, len(out.Results))
		for i, r := range out.Results {
			results[i].ID = r.ID
			if r.Status < 200 || r.Status >= 300 {
				results[i].Err = &Error{Status: r.Status, Code: r.Code, Detail: r.Detail}
			}
		}
		return results, nil
	}
	req := struct {
		Settles []Settle `json:"settles"`
	}{settles}
	var out struct {
		Results []struct {
			settleStatus
			Envelope json.RawMessage `json:"envelope"`
		} `json:"results"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/settle", req, &out); err != nil {
		return nil, err
	}
	results := make([]SettleResult, len(out.Results))
	for i, r := range out.Results {
		results[i].ID = r.ID
		switch {
		case r.Status < 200 || r.Status >= 300:
			results[i].Err = &Error{Status: r.Status, Code: r.Code, Detail: r.Detail}
		case len(r.Envelope) > 0:
			var err error
			if results[i].Envelope, err = envelope.Decode(r.Envelope); err != nil {
				results[i].Err = fmt.Errorf("rdq: the settle answer for %s: %w", r.ID, err)
			}
		}
	}
	return results, nil
}

// ExtendLease makes the lease end extend from now (POST /v1/tasks/{id}/lease);
// LEASE_LOST when the lease is no longer held. The task's envelope is
// answered: its CancelRequested is set when a cancel was asked of the task
// while it ran (the handler should stop; see CancelRequested).
func (c *Client) ExtendLease(ctx context.Context, id, leaseToken string, extend time.Duration) (envelope.Envelope, error) {
	if id == "" {
		return envelope.Envelope{}, errEmptyID
	}
	ms := extend.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	req := struct {
		LeaseToken string `json:"lease_token"`
		ExtendMs   int64  `json:"extend_ms"`
	}{leaseToken, ms}
	var env envelope.Envelope
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/"+escape(id)+"/lease", req, &env)
	return env, err
}
