package rdq_test

// Schedules against a real server: managed over HTTP, and declared in code
// by a worker, fired by the server's scheduler.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

// scheduleName is a schedule name of this test's own.
func scheduleName(t testing.TB, what string) string {
	return what + "." + queueName(t)
}

func TestScheduleManagementRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		name := scheduleName(t, "report")
		s := rdq.CronSchedule(name, "*/5 * * * *", rdq.ScheduleTask{
			Queue: q, HandlerRef: "build-report", Payload: []byte(`{"days":1}`), ContentType: "application/json",
			Headers: map[string]string{"team": "data"}, Priority: 3,
		})
		s.TZ = "Europe/London"
		before := time.Now()
		st, created, err := c.PutSchedule(ctx, s)
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		if !created || st.Name != name || st.Owner != rdq.ScheduleOwnerAPI || st.Fires != 0 {
			t.Fatalf("put answered created=%v %+v", created, st)
		}
		got := st.Schedule
		if got.Name != name || got.Cron != "*/5 * * * *" || got.Every != 0 || got.TZ != "Europe/London" ||
			got.Task.Queue != q || got.Task.HandlerRef != "build-report" || string(got.Task.Payload) != `{"days":1}` ||
			got.Task.ContentType != "application/json" || !maps.Equal(got.Task.Headers, s.Task.Headers) ||
			got.Task.Priority != 3 || got.Paused || got.Overlap != rdq.OverlapAllow || got.CatchUp.Policy != rdq.CatchUpLatest ||
			!got.Start.IsZero() || !got.End.IsZero() {
			t.Fatalf("stored %+v", got)
		}
		if st.NextDue.Before(before) || st.NextDue.Minute()%5 != 0 || st.NextDue.Second() != 0 {
			t.Fatalf("next due %v", st.NextDue)
		}

		// A put of the same name replaces the definition and keeps the rest.
		s.Task.Priority = 7
		s.Overlap = rdq.OverlapSkipIfRunning
		replaced, created, err := c.PutSchedule(ctx, s)
		if err != nil || created {
			t.Fatalf("put again: created=%v %v", created, err)
		}
		if replaced.Schedule.Task.Priority != 7 || replaced.Schedule.Overlap != rdq.OverlapSkipIfRunning ||
			!replaced.CreatedAt.Equal(st.CreatedAt) || replaced.UpdatedAt.Before(st.UpdatedAt) {
			t.Fatalf("replaced %+v (first %+v)", replaced, st)
		}
		one, err := c.GetSchedule(ctx, name)
		if err != nil || one.Schedule.Task.Priority != 7 || one.Owner != rdq.ScheduleOwnerAPI || !one.CreatedAt.Equal(st.CreatedAt) {
			t.Fatalf("get: %+v %v", one, err)
		}

		// An interval with a start, an end and every policy round-trips.
		start := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
		every := rdq.EverySchedule(scheduleName(t, "sweep"), 90*time.Second, rdq.ScheduleTask{Queue: q, HandlerRef: "sweep", FlowKey: "tenant-1"})
		every.Start, every.End = start, start.Add(48*time.Hour)
		every.CatchUp = rdq.CatchUp{Policy: rdq.CatchUpAll, Max: 3, Window: 10 * time.Minute}
		every.Overlap = rdq.OverlapSkipIfUnfinished
		if _, created, err := c.PutSchedule(ctx, every); err != nil || !created {
			t.Fatalf("put the interval: created=%v %v", created, err)
		}

		all, err := c.ListSchedules(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		names := make([]string, 0, len(all))
		for _, st := range all {
			names = append(names, st.Name)
			if st.Name == every.Name {
				g := st.Schedule
				if g.Every != 90*time.Second || g.Cron != "" || !g.Start.Equal(every.Start) || !g.End.Equal(every.End) ||
					g.CatchUp != every.CatchUp || g.Overlap != rdq.OverlapSkipIfUnfinished || g.Task.FlowKey != "tenant-1" ||
					g.Task.ContentType != "application/octet-stream" || g.TZ != "UTC" {
					t.Fatalf("listed %+v", g)
				}
			}
		}
		if want := []string{name, every.Name}; !slices.Equal(names, want) { // by name: report…, sweep…
			t.Fatalf("listed %v, want %v", names, want)
		}

		due, err := c.NextDue(ctx, name, 3)
		if err != nil || len(due) != 3 {
			t.Fatalf("next: %v %v", due, err)
		}
		for i, d := range due {
			if d.Minute()%5 != 0 || d.Second() != 0 || d.Nanosecond() != 0 || (i > 0 && d.Sub(due[i-1]) != 5*time.Minute) {
				t.Fatalf("next due times %v", due)
			}
		}
		if !due[0].After(before.Add(-time.Second)) || due[0].After(time.Now().Add(5*time.Minute)) {
			t.Fatalf("the first due time %v is not the next one", due[0])
		}
		due, err = c.NextDue(ctx, every.Name, 4)
		if err != nil || len(due) != 4 {
			t.Fatalf("next of the interval: %v %v", due, err)
		}
		for i, d := range due {
			if d.Sub(start)%(90*time.Second) != 0 || (i > 0 && d.Sub(due[i-1]) != 90*time.Second) {
				t.Fatalf("next due times %v of an interval from %v", due, start)
			}
		}
		if due, err := c.NextDue(ctx, name, 0); err != nil || len(due) != 5 {
			t.Fatalf("the default count: %v %v", due, err)
		}

		paused, err := c.PauseSchedule(ctx, name)
		if err != nil || !paused.Schedule.Paused {
			t.Fatalf("pause: %+v %v", paused.Schedule, err)
		}
		if one, err := c.GetSchedule(ctx, name); err != nil || !one.Schedule.Paused {
			t.Fatalf("get after pause: %+v %v", one.Schedule, err)
		}
		resumed, err := c.ResumeSchedule(ctx, name)
		if err != nil || resumed.Schedule.Paused {
			t.Fatalf("resume: %+v %v", resumed.Schedule, err)
		}

		env, err := c.RunSchedule(ctx, name)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if env.ID == "" || env.Queue != q || env.HandlerRef != "build-report" || string(env.Payload) != `{"days":1}` ||
			env.Priority != 7 || env.Status != envelope.StatusPending || env.Headers["team"] != "data" ||
			env.Headers["rdq.schedule"] != name || env.Headers["rdq.schedule_manual"] != "true" {
			b, _ := env.Encode()
			t.Fatalf("run submitted %s", b)
		}
		if _, due := env.Headers["rdq.schedule_due"]; due {
			t.Fatalf("a manual run has a due time: %v", env.Headers)
		}
		if stored, err := c.Get(ctx, env.ID); err != nil || stored.Headers["rdq.schedule"] != name {
			t.Fatalf("the run's task: %v %v", stored.Headers, err)
		}
		if one, err := c.GetSchedule(ctx, name); err != nil || one.Fires != 0 {
			t.Fatalf("a manual run counted as a fire: %+v %v", one, err)
		}

		if err := c.DeleteSchedule(ctx, name); err != nil {
			t.Fatalf("delete: %v", err)
		}
		_, err = c.GetSchedule(ctx, name)
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeScheduleNotFound || e.Status != 404 {
			t.Fatalf("get after delete: %v", err)
		}
		for what, err := range map[string]error{
			"delete": c.DeleteSchedule(ctx, name),
			"pause":  second(c.PauseSchedule(ctx, name)),
			"run":    second(c.RunSchedule(ctx, name)),
			"next":   second(c.NextDue(ctx, name, 2)),
		} {
			if !rdq.IsCode(err, rdq.CodeScheduleNotFound) {
				t.Errorf("%s of a deleted schedule: %v", what, err)
			}
		}
		if _, err := c.Get(ctx, env.ID); err != nil {
			t.Fatalf("the task of a deleted schedule is gone: %v", err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func TestBadSchedulesAreRefusedWithTheServersCodeAndNothingIsStored(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		task := rdq.ScheduleTask{Queue: q, HandlerRef: "h"}
		cases := []struct {
			s           rdq.Schedule
			code, field string
		}{
			{rdq.CronSchedule(scheduleName(t, "cron"), "not a cron", task), rdq.CodeInvalidCron, "spec.cron"},
			{rdq.CronSchedule(scheduleName(t, "feb30"), "0 0 30 2 *", task), rdq.CodeInvalidCron, "spec.cron"},
			{func() rdq.Schedule {
				s := rdq.CronSchedule(scheduleName(t, "tz"), "0 9 * * *", task)
				s.TZ = "Mars/Olympus_Mons"
				return s
			}(), rdq.CodeUnknownTimeZone, "tz"},
			{rdq.EverySchedule(scheduleName(t, "long"), 400*24*time.Hour, task), rdq.CodeInvalidInterval, "spec.every_ms"},
			{func() rdq.Schedule {
				s := rdq.EverySchedule(scheduleName(t, "window"), time.Minute, task)
				s.Start, s.End = time.Now(), time.Now().Add(-time.Hour)
				return s
			}(), rdq.CodeInvalidWindow, "end_ms"},
		}
		for _, tc := range cases {
			_, _, err := c.PutSchedule(ctx, tc.s)
			var e *rdq.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field || e.Status != 400 {
				t.Errorf("%s: %v (field %q)", tc.s.Name, err, fieldOf(err))
			}
			if _, err := c.GetSchedule(ctx, tc.s.Name); !rdq.IsCode(err, rdq.CodeScheduleNotFound) {
				t.Errorf("%s was stored: %v", tc.s.Name, err)
			}
		}
		_, _, err := c.PutSchedule(ctx, rdq.CronSchedule("Bad Name", "* * * * *", task))
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeInvalidScheduleName || e.Status != 0 {
			t.Fatalf("a bad name: %v", err)
		}
		if all, err := c.ListSchedules(ctx); err != nil || len(all) != 0 {
			t.Fatalf("stored %+v (%v)", all, err)
		}
	})
}

// startScheduleWorker runs a worker until the test ends, or until stop is
// called; it answers the worker.
func startScheduleWorker(t *testing.T, c *rdq.Client, cfg rdq.WorkerConfig) (w *rdq.Worker, stop func()) {
	t.Helper()
	w, err := rdq.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// undeclaredOnceKnown waits until the worker has stored its schedules and
// answers the code-owned ones it does not declare.
func undeclaredOnceKnown(t *testing.T, w *rdq.Worker) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if u := w.UndeclaredSchedules(); u != nil {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never stored its schedules")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestScheduleDeclaredByAWorkerFiresAndOneNoLongerDeclaredIsReportedNotDeleted(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		ticking := scheduleName(t, "tick")
		ticks := make(chan envelope.Envelope, 16)
		reg := rdq.NewRegistry()
		reg.Register("tick", func(ctx context.Context, task envelope.Envelope) error {
			select {
			case ticks <- task:
			default:
			}
			return nil
		})
		// An api-owned schedule is never reported, declared or not.
		byHand := rdq.CronSchedule(scheduleName(t, "by-hand"), "0 0 1 1 *", rdq.ScheduleTask{Queue: q, HandlerRef: "tick"})
		if _, _, err := c.PutSchedule(ctx, byHand); err != nil {
			t.Fatalf("put by hand: %v", err)
		}

		var firstLog syncBuffer
		w1, stop1 := startScheduleWorker(t, c, rdq.WorkerConfig{
			Queues: []string{q}, Registry: reg, PollInterval: 50 * time.Millisecond,
			Logger:    slog.New(slog.NewTextHandler(&firstLog, nil)),
			Schedules: []rdq.Schedule{rdq.EverySchedule(ticking, time.Second, rdq.ScheduleTask{Queue: q, HandlerRef: "tick", Payload: []byte("t")})},
		})
		if u := undeclaredOnceKnown(t, w1); len(u) != 0 {
			t.Fatalf("the first worker reports %v", u)
		}
		if strings.Contains(firstLog.String(), "WARN") {
			t.Fatalf("the first worker warned: %s", firstLog.String())
		}
		st, err := c.GetSchedule(ctx, ticking)
		if err != nil || st.Owner != rdq.ScheduleOwnerCode || st.Schedule.Every != time.Second {
			t.Fatalf("the declared schedule is stored as %+v (%v)", st, err)
		}

		// The server's scheduler fires it; the worker runs the task.
		var task envelope.Envelope
		select {
		case task = <-ticks:
		case <-time.After(30 * time.Second):
			t.Fatal("the declared schedule never fired")
		}
		if task.Headers["rdq.schedule"] != ticking || task.Headers["rdq.schedule_due"] == "" || string(task.Payload) != "t" {
			t.Fatalf("the handler saw %v", task.Headers)
		}
		if _, manual := task.Headers["rdq.schedule_manual"]; manual {
			t.Fatalf("a fire is marked manual: %v", task.Headers)
		}
		stop1()

		// The next deploy declares another set: the first schedule is
		// reported, kept, and still owned by code; the api one is not.
		other := rdq.CronSchedule(scheduleName(t, "nightly"), "30 2 * * *", rdq.ScheduleTask{Queue: q, HandlerRef: "tick"})
		other.TZ = "Asia/Tokyo"
		var secondLog syncBuffer
		w2, _ := startScheduleWorker(t, c, rdq.WorkerConfig{
			Queues: []string{q}, Registry: reg, PollInterval: 50 * time.Millisecond,
			Logger:    slog.New(slog.NewTextHandler(&secondLog, nil)),
			Schedules: []rdq.Schedule{other},
		})
		if u := undeclaredOnceKnown(t, w2); !slices.Equal(u, []string{ticking}) {
			t.Fatalf("the second worker reports %v, want [%s]", u, ticking)
		}
		if logs := secondLog.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "rdq schedule delete "+ticking) ||
			strings.Contains(logs, byHand.Name) {
			t.Fatalf("the second worker logged: %s", logs)
		}
		if st, err := c.GetSchedule(ctx, ticking); err != nil || st.Owner != rdq.ScheduleOwnerCode {
			t.Fatalf("the undeclared schedule: %+v (%v)", st, err)
		}
		if st, err := c.GetSchedule(ctx, other.Name); err != nil || st.Owner != rdq.ScheduleOwnerCode || st.Schedule.TZ != "Asia/Tokyo" {
			t.Fatalf("the second worker's schedule: %+v (%v)", st, err)
		}
		if st, err := c.GetSchedule(ctx, byHand.Name); err != nil || st.Owner != rdq.ScheduleOwnerAPI {
			t.Fatalf("the api schedule: %+v (%v)", st, err)
		}
	})
}

func TestScheduleAWorkerDeclaringAnInvalidScheduleFailsToStart(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		bad := rdq.CronSchedule(scheduleName(t, "bad"), "61 * * * *", rdq.ScheduleTask{Queue: q, HandlerRef: "h"})
		reg := rdq.NewRegistry()
		ran := make(chan struct{}, 1)
		reg.Register("h", func(ctx context.Context, task envelope.Envelope) error {
			ran <- struct{}{}
			return nil
		})
		submit(t, c, rdq.Task{Queue: q, HandlerRef: "h"})
		w, err := rdq.NewWorker(c, rdq.WorkerConfig{Queues: []string{q}, Registry: reg, Schedules: []rdq.Schedule{bad}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the worker started")
		}
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != rdq.CodeInvalidCron || e.Field != "spec.cron" || !strings.Contains(err.Error(), bad.Name) {
			t.Fatalf("Run answered %v", err)
		}
		select {
		case <-ran:
			t.Fatal("the worker ran a task")
		default:
		}
		if _, err := c.GetSchedule(ctx, bad.Name); !rdq.IsCode(err, rdq.CodeScheduleNotFound) {
			t.Fatalf("the refused schedule was stored: %v", err)
		}
		if w.UndeclaredSchedules() != nil {
			t.Fatalf("a worker that did not start reports %v", w.UndeclaredSchedules())
		}
	})
}
