package rdq

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"rdq.dev/sdk/go/envelope"
)

// CancelRequest selects tasks of a queue to cancel: PENDING ones, and
// running (IN_FLIGHT) ones unless PendingOnly is set. The filters combine;
// none selects every such task of the queue, so try DryRun first.
type CancelRequest struct {
	IDs         []string          `json:"ids,omitempty"`
	HandlerRef  string            `json:"handler_ref,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	OlderThanMs uint64            `json:"older_than_ms,omitempty"`
	Limit       int               `json:"limit,omitempty"`
	DryRun      bool              `json:"dry_run,omitempty"`
	// Message is why, recorded in each task's dead reason (cut to 4 KiB).
	Message string `json:"message,omitempty"`
	// PendingOnly leaves running tasks alone: only PENDING ones are cancelled.
	PendingOnly bool `json:"pending_only,omitempty"`
}

// CancelResult says which tasks were (or, in a dry run, would be) cancelled.
type CancelResult struct {
	Queue  string `json:"queue"`
	DryRun bool   `json:"dry_run"`
	Count  int    `json:"count"`
	// IDs are every task cancelled or asked to stop.
	IDs []string `json:"ids"`
	// Running are those of IDs that were running: their workers are asked
	// to stop them, and they end DEAD with reason CANCELLED unless their
	// handler succeeds first. The others were PENDING and are DEAD now.
	Running []string `json:"running"`
}

// Cancel cancels tasks (POST /v1/queues/{q}/cancel, admin): a PENDING task
// becomes DEAD with reason CANCELLED and keeps its history (DLQRedrive
// brings it back); a running one is marked, its worker is told (the
// handler's context is cancelled, see CancelRequested), and it ends DEAD
// with reason CANCELLED unless its handler succeeds. One id alone that
// cannot be cancelled is an *Error with code TASK_NOT_FOUND or
// INVALID_TRANSITION; a store that cannot cancel (RabbitMQ) answers
// UNSUPPORTED.
func (c *Client) Cancel(ctx context.Context, queue string, req CancelRequest) (CancelResult, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return CancelResult{}, localError(err)
	}
	var out CancelResult
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+escape(queue)+"/cancel", req, &out)
	return out, err
}

// TaskListOptions filters and pages a listing of a queue's tasks.
type TaskListOptions struct {
	Status     envelope.Status // empty: every status
	HandlerRef string
	Header     string // KEY=VALUE
	Limit      int    // 0: the server's default (50)
	Cursor     string // NextCursor of the previous page
}

// ListTasks lists a queue's tasks, newest first (GET /v1/queues/{q}/tasks).
func (c *Client) ListTasks(ctx context.Context, queue string, opts TaskListOptions) (DLQPage, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return DLQPage{}, localError(err)
	}
	q := url.Values{}
	for k, v := range map[string]string{
		"status": string(opts.Status), "handler_ref": opts.HandlerRef, "header": opts.Header, "cursor": opts.Cursor,
	} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	path := "/v1/queues/" + escape(queue) + "/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page DLQPage
	_, err := c.do(ctx, http.MethodGet, path, nil, &page)
	return page, err
}
