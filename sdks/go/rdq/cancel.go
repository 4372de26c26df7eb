package rdq

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"rdq.dev/sdk/go/envelope"
)

// CancelRequest selects PENDING tasks of a queue to cancel. The filters
// combine; none selects every PENDING task of the queue, so try DryRun
// first.
type CancelRequest struct {
	IDs         []string          `json:"ids,omitempty"`
	HandlerRef  string            `json:"handler_ref,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	OlderThanMs uint64            `json:"older_than_ms,omitempty"`
	Limit       int               `json:"limit,omitempty"`
	DryRun      bool              `json:"dry_run,omitempty"`
	// Message is why, recorded in each task's dead reason (cut to 4 KiB).
	Message string `json:"message,omitempty"`
}

// CancelResult says which tasks were (or, in a dry run, would be) cancelled.
type CancelResult struct {
	Queue  string   `json:"queue"`
	DryRun bool     `json:"dry_run"`
	Count  int      `json:"count"`
	IDs    []string `json:"ids"`
}

// Cancel cancels PENDING tasks (POST /v1/queues/{q}/cancel, admin): each
// becomes DEAD with reason CANCELLED and keeps its history; DLQRedrive
// brings it back. One id alone that cannot be cancelled is an *Error with
// code TASK_NOT_FOUND or INVALID_TRANSITION; a store that cannot cancel
// (RabbitMQ) answers UNSUPPORTED.
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
