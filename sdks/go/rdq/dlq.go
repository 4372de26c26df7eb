package rdq

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"rdq.dev/sdk/go/envelope"
)

// DLQListOptions filters and pages a DLQ listing.
type DLQListOptions struct {
	Limit     int    // 0: the server's default (50)
	Cursor    string // NextCursor of the previous page
	ErrorType string // glob on the latest error's type (*, ?, [a-z], [!x])
	// Reason: only tasks that died for this reason (an envelope.DeadReason*
	// code, or Unrecorded); another value is refused (INVALID_ARGUMENT).
	Reason string
}

// Unrecorded is the reason filter for dead tasks without a recorded reason.
const Unrecorded = "UNRECORDED"

// DLQPage is one page of dead tasks, newest first.
type DLQPage struct {
	Items      []envelope.Envelope `json:"items"`
	NextCursor *string             `json:"next_cursor"`
}

// DLQList lists a queue's dead tasks (GET /v1/queues/{q}/dead, admin).
func (c *Client) DLQList(ctx context.Context, queue string, opts DLQListOptions) (DLQPage, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return DLQPage{}, localError(err)
	}
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.ErrorType != "" {
		q.Set("error_type", opts.ErrorType)
	}
	if opts.Reason != "" {
		q.Set("reason", opts.Reason)
	}
	path := "/v1/queues/" + escape(queue) + "/dead"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page DLQPage
	_, err := c.do(ctx, http.MethodGet, path, nil, &page)
	return page, err
}

// DLQShow reads one dead task of the queue (GET /v1/queues/{q}/dead/{id}).
func (c *Client) DLQShow(ctx context.Context, queue, id string) (envelope.Envelope, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return envelope.Envelope{}, localError(err)
	}
	if id == "" {
		return envelope.Envelope{}, errEmptyID
	}
	var env envelope.Envelope
	_, err := c.do(ctx, http.MethodGet, "/v1/queues/"+escape(queue)+"/dead/"+escape(id), nil, &env)
	return env, err
}

// RedriveRequest selects dead tasks to redrive; empty selects all.
type RedriveRequest struct {
	IDs       []string `json:"ids,omitempty"`
	ErrorType string   `json:"error_type,omitempty"`
	Reason    string   `json:"reason,omitempty"` // as DLQListOptions.Reason
	Limit     int      `json:"limit,omitempty"`
	DryRun    bool     `json:"dry_run,omitempty"`
}

// RedriveResult says which tasks were (or, in a dry run, would be) redriven.
type RedriveResult struct {
	Queue  string   `json:"queue"`
	DryRun bool     `json:"dry_run"`
	Count  int      `json:"count"`
	IDs    []string `json:"ids"`
}

// DLQRedrive makes dead tasks PENDING again with attempt_count 0 and their
// history kept (POST /v1/queues/{q}/dead/redrive, admin).
func (c *Client) DLQRedrive(ctx context.Context, queue string, req RedriveRequest) (RedriveResult, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return RedriveResult{}, localError(err)
	}
	var out RedriveResult
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+escape(queue)+"/dead/redrive", req, &out)
	return out, err
}

// ReasonCount is how many dead tasks died for one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// DLQReasons counts a queue's dead tasks by reason, most first
// (GET /v1/queues/{q}/dead/reasons).
func (c *Client) DLQReasons(ctx context.Context, queue string) ([]ReasonCount, error) {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return nil, localError(err)
	}
	var out struct {
		Reasons []ReasonCount `json:"reasons"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/queues/"+escape(queue)+"/dead/reasons", nil, &out)
	return out.Reasons, err
}

// DLQExport streams a queue's dead tasks, oldest first, calling each for
// every envelope (GET /v1/queues/{q}/dead/export, admin). An error from each
// stops the export and is returned. errorType, when not empty, is a glob on
// the latest error's type.
func (c *Client) DLQExport(ctx context.Context, queue, errorType string, each func(envelope.Envelope) error) error {
	return c.DLQExportWhere(ctx, queue, DLQListOptions{ErrorType: errorType}, each)
}

// DLQExportWhere is DLQExport filtered by error type and reason (the
// options' Limit and Cursor are not used).
func (c *Client) DLQExportWhere(ctx context.Context, queue string, filter DLQListOptions, each func(envelope.Envelope) error) error {
	if err := envelope.ValidateQueueName(queue); err != nil {
		return localError(err)
	}
	q := url.Values{}
	if filter.ErrorType != "" {
		q.Set("error_type", filter.ErrorType)
	}
	if filter.Reason != "" {
		q.Set("reason", filter.Reason)
	}
	path := "/v1/queues/" + escape(queue) + "/dead/export"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		env, err := envelope.Decode(sc.Bytes())
		if err != nil {
			return fmt.Errorf("rdq: export line %d: %w", line, err)
		}
		if err := each(env); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("rdq: reading the export: %w", err)
	}
	return nil
}
