package rdq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// Schedule is a periodic schedule (docs/schedules.md): which task to submit,
// and when. The scheduler of every `rdq serve` node fires it; each due time
// is submitted once whatever the number of nodes. Make one with
// CronSchedule or EverySchedule, or as a literal; exactly one of Cron and
// Every is set. The zero value of every other field is the server's
// default. It encodes to (and decodes from) the JSON the HTTP API and
// `rdq schedule put --file` take.
type Schedule struct {
	// Name is unique: 1–240 bytes of [a-z0-9._-], not "." or ".." (the
	// rules of queue names; INVALID_SCHEDULE_NAME, checked locally).
	Name string
	// Task is the task each fire submits.
	Task ScheduleTask
	// Cron is a cron pattern, 5 fields or 6 with leading seconds, read on
	// the wall clock of TZ ("*/5 * * * *", "30 2 * * *", "@daily").
	Cron string
	// Every is a fixed interval of elapsed time, a whole number of
	// milliseconds from 1 ms to 366 days, anchored at Start or else at the
	// Unix epoch; it ignores TZ.
	Every time.Duration
	// TZ is the IANA zone a cron pattern is read in; "" is UTC.
	TZ string
	// Start, when not zero, is the first instant a due time may fall on
	// (inclusive; millisecond precision), and an interval's anchor.
	Start time.Time
	// End, when not zero, is the last instant a due time may fall on
	// (inclusive; millisecond precision); after Start.
	End time.Time
	// Paused: a paused schedule submits nothing, and the due times it
	// passes are skipped, not caught up on resume.
	Paused bool
	// Overlap is what a fire does while the previous fire's task is
	// unfinished; "" is OverlapAllow.
	Overlap Overlap
	// CatchUp is what a tick does with due times missed while no node was
	// ticking; the zero value is CatchUpLatest.
	CatchUp CatchUp
}

// ScheduleTask is the task a schedule's fires submit: the fields of a
// submit worth repeating, with Task's rules.
type ScheduleTask struct {
	Queue      string
	HandlerRef string
	// Payload is opaque bytes (base64 on the wire).
	Payload []byte
	// ContentType is the payload's MIME type; "" is application/octet-stream.
	ContentType string
	// Headers are user headers; no key may start with "rdq." in any case
	// (RESERVED_HEADER, checked locally).
	Headers map[string]string
	// Priority: higher is claimed first.
	Priority uint8
	// FlowKey: the queue's per-key limits and fairness count each task by it.
	FlowKey string
}

// Overlap is a schedule's overlap policy: what a fire does while the task
// of the previous fire has not finished.
type Overlap string

// The overlap policies (docs/schedules.md#overlap).
const (
	// OverlapAllow submits regardless, as cron does (the default).
	OverlapAllow Overlap = "allow"
	// OverlapSkipIfPending skips while the previous task waits to be claimed.
	OverlapSkipIfPending Overlap = "skip_if_pending"
	// OverlapSkipIfRunning skips while the previous task is claimed by a worker.
	OverlapSkipIfRunning Overlap = "skip_if_running"
	// OverlapSkipIfUnfinished skips while the previous task waits or runs.
	OverlapSkipIfUnfinished Overlap = "skip_if_unfinished"
)

// CatchUpPolicy names a catch-up policy.
type CatchUpPolicy string

// The catch-up policies (docs/schedules.md#catch-up).
const (
	// CatchUpSkip submits a due time only if it is on time.
	CatchUpSkip CatchUpPolicy = "skip"
	// CatchUpLatest submits the most recent missed due time, however late
	// (the default).
	CatchUpLatest CatchUpPolicy = "latest"
	// CatchUpAll submits every missed due time within Window of now, at
	// most Max of them (the newest).
	CatchUpAll CatchUpPolicy = "all"
)

// CatchUp is a schedule's catch-up policy. Max and Window belong to
// CatchUpAll only (Max 1–1000; Window a whole number of milliseconds from
// 1 ms to 366 days). The zero value is the server's default, CatchUpLatest.
type CatchUp struct {
	Policy CatchUpPolicy
	Max    int
	Window time.Duration
}

// CronSchedule is a schedule name firing task on the cron pattern, in UTC
// (set TZ for another zone), every other field at its default.
func CronSchedule(name, pattern string, task ScheduleTask) Schedule {
	return Schedule{Name: name, Task: task, Cron: pattern}
}

// EverySchedule is a schedule name firing task every interval (a whole
// number of milliseconds), every other field at its default.
func EverySchedule(name string, every time.Duration, task ScheduleTask) Schedule {
	return Schedule{Name: name, Task: task, Every: every}
}

// ScheduleOwner says who put a schedule.
type ScheduleOwner string

// The owners of a schedule.
const (
	// ScheduleOwnerAPI: put over HTTP, gRPC or the CLI (Client.PutSchedule).
	ScheduleOwnerAPI ScheduleOwner = "api"
	// ScheduleOwnerCode: declared by a program at its start
	// (WorkerConfig.Schedules).
	ScheduleOwnerCode ScheduleOwner = "code"
)

// ScheduleState is a stored schedule with its firing state, as every read
// answers it.
type ScheduleState struct {
	Name string
	// Schedule is the definition as put, with its defaults written out
	// (TZ "UTC", Overlap "allow", CatchUp "latest", the content type).
	Schedule Schedule
	Owner    ScheduleOwner
	// CreatedAt is when it was first put, UpdatedAt when it was last put.
	CreatedAt, UpdatedAt time.Time
	// LastDue is the last due time accounted for, submitted or skipped
	// (zero: none yet).
	LastDue time.Time
	// LastFireAt and LastFiredTask are the last fire that submitted a task
	// (zero and "": none yet).
	LastFireAt    time.Time
	LastFiredTask string
	// NextDue is the next due time (zero: none, the schedule has ended).
	NextDue time.Time
	// Fires counts the tasks submitted over the schedule's life.
	Fires uint64
	// Skips counts the skipped due times by reason (catch_up_skip, paused,
	// overlap_running, …).
	Skips map[string]uint64
}

// scheduleWire and the types below are the JSON forms, field for field as
// the HTTP API reads and writes them.
type scheduleWire struct {
	Name    string           `json:"name,omitempty"`
	Task    scheduleTaskWire `json:"task"`
	Spec    scheduleSpecWire `json:"spec"`
	TZ      string           `json:"tz,omitempty"`
	StartMs *int64           `json:"start_ms,omitempty"`
	EndMs   *int64           `json:"end_ms,omitempty"`
	Paused  bool             `json:"paused,omitempty"`
	Overlap Overlap          `json:"overlap,omitempty"`
	CatchUp json.RawMessage  `json:"catch_up,omitempty"`
}

type scheduleTaskWire struct {
	Queue       string            `json:"queue"`
	HandlerRef  string            `json:"handler_ref"`
	Payload     string            `json:"payload,omitempty"`
	ContentType string            `json:"payload_content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Priority    uint8             `json:"priority,omitempty"`
	FlowKey     string            `json:"flow_key,omitempty"`
}

type scheduleSpecWire struct {
	Cron    *string `json:"cron,omitempty"`
	EveryMs *uint64 `json:"every_ms,omitempty"`
}

type catchUpAllWire struct {
	All struct {
		Max      int    `json:"max"`
		WindowMs uint64 `json:"window_ms"`
	} `json:"all"`
}

type scheduleStateWire struct {
	Name          string            `json:"name"`
	Schedule      Schedule          `json:"schedule"`
	Owner         ScheduleOwner     `json:"owner"`
	CreatedAtMs   int64             `json:"created_at_ms"`
	UpdatedAtMs   int64             `json:"updated_at_ms"`
	LastDueMs     *int64            `json:"last_due_ms"`
	LastFireAtMs  *int64            `json:"last_fire_at_ms"`
	LastFiredTask *string           `json:"last_fired_task"`
	NextDueMs     *int64            `json:"next_due_ms"`
	Fires         uint64            `json:"fires"`
	Skips         map[string]uint64 `json:"skips"`
}

// check refuses, before any request, what the server would refuse for
// sure, and what has no JSON form (no spec, or an interval that is not
// whole milliseconds). Fields are named as the server names them.
func (s *Schedule) check() error {
	if err := checkScheduleName(s.Name); err != nil {
		return err
	}
	if err := s.Task.check(); err != nil {
		return err
	}
	switch {
	case s.Cron != "" && s.Every != 0:
		return &Error{Code: CodeInvalidField, Field: "spec", Detail: "a schedule has a cron pattern or an interval, not both"}
	case s.Cron == "" && s.Every == 0:
		return &Error{Code: CodeInvalidField, Field: "spec", Detail: "a schedule needs a cron pattern or an interval"}
	case s.Cron == "" && (s.Every < time.Millisecond || s.Every%time.Millisecond != 0):
		return &Error{Code: CodeInvalidInterval, Field: "spec.every_ms", Detail: fmt.Sprintf("the interval %v is not a whole number of milliseconds from 1 ms", s.Every)}
	}
	c := s.CatchUp
	switch c.Policy {
	case "", CatchUpSkip, CatchUpLatest:
		if c.Max != 0 || c.Window != 0 {
			return &Error{Code: CodeInvalidField, Field: "catch_up", Detail: "Max and Window belong to CatchUpAll"}
		}
	case CatchUpAll:
		if c.Max < 1 {
			return &Error{Code: CodeInvalidWindow, Field: "catch_up.all.max", Detail: fmt.Sprintf("max is %d; it is 1 to 1000", c.Max)}
		}
		if c.Window < time.Millisecond || c.Window%time.Millisecond != 0 {
			return &Error{Code: CodeInvalidWindow, Field: "catch_up.all.window_ms", Detail: fmt.Sprintf("the window %v is not a whole number of milliseconds from 1 ms", c.Window)}
		}
	default:
		return &Error{Code: CodeInvalidField, Field: "catch_up", Detail: fmt.Sprintf("%q is not a catch-up policy (skip, latest, all)", c.Policy)}
	}
	return nil
}

func (t *ScheduleTask) check() error {
	for _, err := range []error{
		envelope.ValidateQueueName(t.Queue),
		envelope.ValidateHandlerRef(t.HandlerRef),
		envelope.ValidateUserHeaders(t.Headers),
	} {
		if err != nil {
			return taskFieldError(err)
		}
	}
	if t.FlowKey != "" {
		if err := envelope.ValidateFlowKey(t.FlowKey); err != nil {
			return taskFieldError(err)
		}
	}
	return nil
}

// taskFieldError is a local refusal of the template, its field under
// "task." as the server names it.
func taskFieldError(err error) error {
	err = localError(err)
	var e *Error
	if errors.As(err, &e) && e.Field != "" {
		e.Field = "task." + e.Field
	}
	return err
}

// checkScheduleName refuses a bad schedule name with INVALID_SCHEDULE_NAME,
// as the server would: the rules are those of queue names.
func checkScheduleName(name string) error {
	err := envelope.ValidateQueueName(name)
	if err == nil {
		return nil
	}
	e := localError(err).(*Error)
	e.Code, e.Field = CodeInvalidScheduleName, "name"
	return e
}

// MarshalJSON writes the schedule as the HTTP API takes it.
func (s Schedule) MarshalJSON() ([]byte, error) {
	w := scheduleWire{
		Name: s.Name,
		Task: scheduleTaskWire{
			Queue: s.Task.Queue, HandlerRef: s.Task.HandlerRef, ContentType: s.Task.ContentType,
			Headers: s.Task.Headers, Priority: s.Task.Priority, FlowKey: s.Task.FlowKey,
		},
		TZ: s.TZ, Paused: s.Paused, Overlap: s.Overlap,
	}
	if len(s.Task.Payload) > 0 {
		w.Task.Payload = base64.StdEncoding.EncodeToString(s.Task.Payload)
	}
	if s.Cron != "" {
		w.Spec.Cron = &s.Cron
	}
	if s.Every != 0 {
		ms := uint64(s.Every.Milliseconds())
		w.Spec.EveryMs = &ms
	}
	if !s.Start.IsZero() {
		ms := s.Start.UnixMilli()
		w.StartMs = &ms
	}
	if !s.End.IsZero() {
		ms := s.End.UnixMilli()
		w.EndMs = &ms
	}
	switch s.CatchUp.Policy {
	case "":
	case CatchUpAll:
		var all catchUpAllWire
		all.All.Max, all.All.WindowMs = s.CatchUp.Max, uint64(s.CatchUp.Window.Milliseconds())
		raw, err := json.Marshal(all)
		if err != nil {
			return nil, err
		}
		w.CatchUp = raw
	default:
		raw, err := json.Marshal(string(s.CatchUp.Policy))
		if err != nil {
			return nil, err
		}
		w.CatchUp = raw
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a schedule as the HTTP API writes it.
func (s *Schedule) UnmarshalJSON(data []byte) error {
	var w scheduleWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	out := Schedule{
		Name: w.Name,
		Task: ScheduleTask{
			Queue: w.Task.Queue, HandlerRef: w.Task.HandlerRef, ContentType: w.Task.ContentType,
			Headers: w.Task.Headers, Priority: w.Task.Priority, FlowKey: w.Task.FlowKey,
		},
		TZ: w.TZ, Paused: w.Paused, Overlap: w.Overlap,
	}
	if w.Task.Payload != "" {
		payload, err := base64.StdEncoding.DecodeString(w.Task.Payload)
		if err != nil {
			return fmt.Errorf("rdq: a schedule's task.payload is not base64: %w", err)
		}
		out.Task.Payload = payload
	}
	switch {
	case w.Spec.Cron != nil && w.Spec.EveryMs == nil:
		out.Cron = *w.Spec.Cron
	case w.Spec.EveryMs != nil && w.Spec.Cron == nil:
		out.Every = time.Duration(*w.Spec.EveryMs) * time.Millisecond
	default:
		return errors.New(`rdq: a schedule's spec is {"cron": …} or {"every_ms": …}`)
	}
	if w.StartMs != nil {
		out.Start = time.UnixMilli(*w.StartMs).UTC()
	}
	if w.EndMs != nil {
		out.End = time.UnixMilli(*w.EndMs).UTC()
	}
	if raw := bytes.TrimSpace(w.CatchUp); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if raw[0] == '"' {
			var policy string
			if err := json.Unmarshal(raw, &policy); err != nil {
				return err
			}
			out.CatchUp.Policy = CatchUpPolicy(policy)
		} else {
			var all catchUpAllWire
			if err := json.Unmarshal(raw, &all); err != nil {
				return fmt.Errorf("rdq: a schedule's catch_up: %w", err)
			}
			out.CatchUp = CatchUp{Policy: CatchUpAll, Max: all.All.Max, Window: time.Duration(all.All.WindowMs) * time.Millisecond}
		}
	}
	*s = out
	return nil
}

// UnmarshalJSON reads a schedule's state as the HTTP API writes it.
func (st *ScheduleState) UnmarshalJSON(data []byte) error {
	var w scheduleStateWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	instant := func(ms *int64) time.Time {
		if ms == nil {
			return time.Time{}
		}
		return time.UnixMilli(*ms).UTC()
	}
	*st = ScheduleState{
		Name: w.Name, Schedule: w.Schedule, Owner: w.Owner,
		CreatedAt: time.UnixMilli(w.CreatedAtMs).UTC(), UpdatedAt: time.UnixMilli(w.UpdatedAtMs).UTC(),
		LastDue: instant(w.LastDueMs), LastFireAt: instant(w.LastFireAtMs), NextDue: instant(w.NextDueMs),
		Fires: w.Fires, Skips: w.Skips,
	}
	if w.LastFiredTask != nil {
		st.LastFiredTask = *w.LastFiredTask
	}
	return nil
}

// MarshalJSON writes a schedule's state as the HTTP API does.
func (st ScheduleState) MarshalJSON() ([]byte, error) {
	instant := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		ms := t.UnixMilli()
		return &ms
	}
	w := scheduleStateWire{
		Name: st.Name, Schedule: st.Schedule, Owner: st.Owner,
		CreatedAtMs: st.CreatedAt.UnixMilli(), UpdatedAtMs: st.UpdatedAt.UnixMilli(),
		LastDueMs: instant(st.LastDue), LastFireAtMs: instant(st.LastFireAt), NextDueMs: instant(st.NextDue),
		Fires: st.Fires, Skips: st.Skips,
	}
	if st.LastFiredTask != "" {
		w.LastFiredTask = &st.LastFiredTask
	}
	if w.Skips == nil {
		w.Skips = map[string]uint64{}
	}
	return json.Marshal(w)
}

func schedulePath(name string) string { return "/v1/schedules/" + escape(name) }

// PutSchedule creates or replaces the schedule s.Name (PUT
// /v1/schedules/{name}, admin on its queue), owned by the API. created is
// true when it is new; a replaced one keeps its cursor and counters. A
// schedule that breaks a rule is an *Error with the rule's code
// (INVALID_CRON, UNKNOWN_TIME_ZONE, INVALID_INTERVAL, INVALID_WINDOW, …)
// and Field, and nothing is stored; bad names, reserved headers and a
// missing spec are refused before any request.
func (c *Client) PutSchedule(ctx context.Context, s Schedule) (state ScheduleState, created bool, err error) {
	return c.putSchedule(ctx, s, ScheduleOwnerAPI)
}

func (c *Client) putSchedule(ctx context.Context, s Schedule, owner ScheduleOwner) (ScheduleState, bool, error) {
	if err := s.check(); err != nil {
		return ScheduleState{}, false, err
	}
	path := schedulePath(s.Name)
	if owner != ScheduleOwnerAPI {
		path += "?owner=" + url.QueryEscape(string(owner))
	}
	var out ScheduleState
	status, err := c.do(ctx, http.MethodPut, path, s, &out)
	return out, status == http.StatusCreated, err
}

// GetSchedule reads one schedule with its firing state (GET
// /v1/schedules/{name}); one that does not exist is SCHEDULE_NOT_FOUND.
func (c *Client) GetSchedule(ctx context.Context, name string) (ScheduleState, error) {
	return c.scheduleCall(ctx, http.MethodGet, name, "")
}

// ListSchedules lists the schedules on queues the caller may read, by name
// (GET /v1/schedules).
func (c *Client) ListSchedules(ctx context.Context) ([]ScheduleState, error) {
	var out struct {
		Schedules []ScheduleState `json:"schedules"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, &out)
	return out.Schedules, err
}

// DeleteSchedule deletes a schedule (DELETE /v1/schedules/{name}, admin);
// the tasks it submitted stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	if err := checkScheduleName(name); err != nil {
		return err
	}
	_, err := c.do(ctx, http.MethodDelete, schedulePath(name), nil, nil)
	return err
}

// PauseSchedule pauses a schedule (POST /v1/schedules/{name}/pause,
// admin): its due times are skipped as paused until it is resumed.
func (c *Client) PauseSchedule(ctx context.Context, name string) (ScheduleState, error) {
	return c.scheduleCall(ctx, http.MethodPost, name, "/pause")
}

// ResumeSchedule resumes a paused schedule from now, without catching up
// on the pause (POST /v1/schedules/{name}/resume, admin).
func (c *Client) ResumeSchedule(ctx context.Context, name string) (ScheduleState, error) {
	return c.scheduleCall(ctx, http.MethodPost, name, "/resume")
}

func (c *Client) scheduleCall(ctx context.Context, method, name, suffix string) (ScheduleState, error) {
	if err := checkScheduleName(name); err != nil {
		return ScheduleState{}, err
	}
	var out ScheduleState
	_, err := c.do(ctx, method, schedulePath(name)+suffix, nil, &out)
	return out, err
}

// RunSchedule submits the schedule's task once now, outside its cadence
// (POST /v1/schedules/{name}/run, admin), and answers the task: it carries
// the headers rdq.schedule (the name) and rdq.schedule_manual ("true"), no
// idempotency key, and moves neither the schedule's cursor nor its counters.
func (c *Client) RunSchedule(ctx context.Context, name string) (envelope.Envelope, error) {
	if err := checkScheduleName(name); err != nil {
		return envelope.Envelope{}, err
	}
	var env envelope.Envelope
	_, err := c.do(ctx, http.MethodPost, schedulePath(name)+"/run", nil, &env)
	return env, err
}

// NextDue answers the schedule's next count due times from now, ascending,
// as the scheduler computes them (GET /v1/schedules/{name}/next): count is
// 1–100, 0 the server's default (5); fewer when the schedule ends. A
// paused schedule has them too; they are skipped unless it is resumed.
func (c *Client) NextDue(ctx context.Context, name string, count int) ([]time.Time, error) {
	if err := checkScheduleName(name); err != nil {
		return nil, err
	}
	path := schedulePath(name) + "/next"
	if count != 0 {
		path += "?count=" + strconv.Itoa(count)
	}
	var out struct {
		DueMs []int64 `json:"due_ms"`
	}
	if _, err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	due := make([]time.Time, len(out.DueMs))
	for i, ms := range out.DueMs {
		due[i] = time.UnixMilli(ms).UTC()
	}
	return due, nil
}
