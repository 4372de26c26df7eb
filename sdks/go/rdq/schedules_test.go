package rdq_test

// Schedules without a server: the JSON form, and what the client refuses
// before any request.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rdq.dev/sdk/go/rdq"
)

// documentedSchedule is the example of docs/schedules.md ("A schedule"),
// without "paused": false (a default the client leaves out).
const documentedSchedule = `{"name":"nightly.report","task":{"queue":"reports","handler_ref":"build-report","payload":"eyJkYXlzIjoxfQ==","payload_content_type":"application/json","headers":{"team":"data"},"priority":5,"flow_key":"tenant-42"},"spec":{"cron":"30 2 * * *"},"tz":"Europe/London","start_ms":1767225600000,"end_ms":1798761599999,"overlap":"skip_if_unfinished","catch_up":{"all":{"max":10,"window_ms":3600000}}}`

func TestAScheduleReadsAndWritesTheDocumentedJSON(t *testing.T) {
	var s rdq.Schedule
	if err := json.Unmarshal([]byte(documentedSchedule), &s); err != nil {
		t.Fatal(err)
	}
	want := rdq.Schedule{
		Name: "nightly.report",
		Task: rdq.ScheduleTask{Queue: "reports", HandlerRef: "build-report", Payload: []byte(`{"days":1}`),
			ContentType: "application/json", Headers: map[string]string{"team": "data"}, Priority: 5, FlowKey: "tenant-42"},
		Cron: "30 2 * * *", TZ: "Europe/London",
		Start:   time.UnixMilli(1767225600000).UTC(),
		End:     time.UnixMilli(1798761599999).UTC(),
		Overlap: rdq.OverlapSkipIfUnfinished,
		CatchUp: rdq.CatchUp{Policy: rdq.CatchUpAll, Max: 10, Window: time.Hour},
	}
	if s.Name != want.Name || s.Cron != want.Cron || s.Every != 0 || s.TZ != want.TZ || !s.Start.Equal(want.Start) ||
		!s.End.Equal(want.End) || s.Paused || s.Overlap != want.Overlap || s.CatchUp != want.CatchUp ||
		s.Task.Queue != want.Task.Queue || s.Task.HandlerRef != want.Task.HandlerRef ||
		!bytes.Equal(s.Task.Payload, want.Task.Payload) || s.Task.ContentType != want.Task.ContentType ||
		!maps.Equal(s.Task.Headers, want.Task.Headers) || s.Task.Priority != 5 || s.Task.FlowKey != want.Task.FlowKey {
		t.Fatalf("read %+v", s)
	}
	out, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != documentedSchedule {
		t.Fatalf("wrote\n%s\nwant\n%s", out, documentedSchedule)
	}

	every := rdq.EverySchedule("tick", 90*time.Second, rdq.ScheduleTask{Queue: "q", HandlerRef: "h"})
	every.Paused = true
	every.CatchUp = rdq.CatchUp{Policy: rdq.CatchUpSkip}
	out, err = json.Marshal(every)
	if err != nil {
		t.Fatal(err)
	}
	const wantEvery = `{"name":"tick","task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":90000},"paused":true,"catch_up":"skip"}`
	if string(out) != wantEvery {
		t.Fatalf("wrote %s", out)
	}
	var back rdq.Schedule
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back.Every != 90*time.Second || back.Cron != "" || !back.Paused || back.CatchUp.Policy != rdq.CatchUpSkip || back.Task.Payload != nil {
		t.Fatalf("read back %+v", back)
	}
}

func TestAScheduleStateReadsTheDocumentedAnswer(t *testing.T) {
	const answer = `{"name":"nightly.report","schedule":{"name":"nightly.report","task":{"queue":"reports","handler_ref":"build-report","payload_content_type":"application/octet-stream","priority":0},"spec":{"cron":"30 2 * * *"},"tz":"Europe/London","paused":false,"overlap":"allow","catch_up":"latest"},"owner":"code","created_at_ms":1767225600000,"updated_at_ms":1767225600001,"last_due_ms":1767321000000,"last_fire_at_ms":1767321000412,"last_fired_task":"01KB0000000000000000000000","next_due_ms":1767407400000,"fires":1,"skips":{"catch_up_skip":2}}`
	var st rdq.ScheduleState
	if err := json.Unmarshal([]byte(answer), &st); err != nil {
		t.Fatal(err)
	}
	if st.Name != "nightly.report" || st.Owner != rdq.ScheduleOwnerCode || st.Fires != 1 || st.Skips["catch_up_skip"] != 2 ||
		st.CreatedAt.UnixMilli() != 1767225600000 || st.UpdatedAt.UnixMilli() != 1767225600001 ||
		st.LastDue.UnixMilli() != 1767321000000 || st.LastFireAt.UnixMilli() != 1767321000412 ||
		st.NextDue.UnixMilli() != 1767407400000 || st.LastFiredTask != "01KB0000000000000000000000" ||
		st.Schedule.Cron != "30 2 * * *" || st.Schedule.CatchUp.Policy != rdq.CatchUpLatest ||
		st.Schedule.Overlap != rdq.OverlapAllow || st.Schedule.Task.ContentType != "application/octet-stream" {
		t.Fatalf("read %+v", st)
	}
	var fresh rdq.ScheduleState
	if err := json.Unmarshal([]byte(`{"name":"n","schedule":{"task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":1000}},"owner":"api","created_at_ms":1,"updated_at_ms":1,"last_due_ms":null,"fires":0,"skips":{}}`), &fresh); err != nil {
		t.Fatal(err)
	}
	if !fresh.LastDue.IsZero() || !fresh.LastFireAt.IsZero() || !fresh.NextDue.IsZero() || fresh.LastFiredTask != "" || fresh.Schedule.Every != time.Second {
		t.Fatalf("read %+v", fresh)
	}
}

// countingServer answers 500 to everything and counts the requests.
func countingServer(t *testing.T) (*rdq.Client, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return newClient(t, srv.URL), &n
}

func TestBadSchedulesAreRefusedBeforeAnyRequest(t *testing.T) {
	c, requests := countingServer(t)
	ctx := context.Background()
	task := rdq.ScheduleTask{Queue: "q", HandlerRef: "h"}
	cases := []struct {
		s           rdq.Schedule
		code, field string
	}{
		{rdq.CronSchedule("Bad Name", "* * * * *", task), rdq.CodeInvalidScheduleName, "name"},
		{rdq.CronSchedule("..", "* * * * *", task), rdq.CodeInvalidScheduleName, "name"},
		{rdq.CronSchedule("", "* * * * *", task), rdq.CodeInvalidScheduleName, "name"},
		{rdq.Schedule{Name: "s", Task: task}, rdq.CodeInvalidField, "spec"},
		{rdq.Schedule{Name: "s", Task: task, Cron: "* * * * *", Every: time.Second}, rdq.CodeInvalidField, "spec"},
		{rdq.EverySchedule("s", 1500*time.Microsecond, task), rdq.CodeInvalidInterval, "spec.every_ms"},
		{rdq.EverySchedule("s", -time.Second, task), rdq.CodeInvalidInterval, "spec.every_ms"},
		{rdq.CronSchedule("s", "* * * * *", rdq.ScheduleTask{Queue: "Q", HandlerRef: "h"}), rdq.CodeInvalidQueueName, "task.queue"},
		{rdq.CronSchedule("s", "* * * * *", rdq.ScheduleTask{Queue: "q", HandlerRef: ""}), rdq.CodeInvalidHandlerRef, "task.handler_ref"},
		{rdq.CronSchedule("s", "* * * * *", rdq.ScheduleTask{Queue: "q", HandlerRef: "h", Headers: map[string]string{"RDQ.x": "1"}}), rdq.CodeReservedHeader, "task.headers.RDQ.x"},
		{rdq.CronSchedule("s", "* * * * *", rdq.ScheduleTask{Queue: "q", HandlerRef: "h", FlowKey: "has space"}), rdq.CodeInvalidField, "task.flow_key"},
		{rdq.Schedule{Name: "s", Task: task, Cron: "* * * * *", CatchUp: rdq.CatchUp{Policy: rdq.CatchUpLatest, Max: 3}}, rdq.CodeInvalidField, "catch_up"},
		{rdq.Schedule{Name: "s", Task: task, Cron: "* * * * *", CatchUp: rdq.CatchUp{Policy: "sometimes"}}, rdq.CodeInvalidField, "catch_up"},
		{rdq.Schedule{Name: "s", Task: task, Cron: "* * * * *", CatchUp: rdq.CatchUp{Policy: rdq.CatchUpAll, Window: time.Hour}}, rdq.CodeInvalidWindow, "catch_up.all.max"},
		{rdq.Schedule{Name: "s", Task: task, Cron: "* * * * *", CatchUp: rdq.CatchUp{Policy: rdq.CatchUpAll, Max: 2}}, rdq.CodeInvalidWindow, "catch_up.all.window_ms"},
	}
	for _, tc := range cases {
		_, _, err := c.PutSchedule(ctx, tc.s)
		var e *rdq.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field || e.Status != 0 {
			t.Errorf("%+v: %v (field %q)", tc.s, err, fieldOf(err))
		}
	}
	for name, call := range map[string]func(string) error{
		"get":    func(n string) error { _, err := c.GetSchedule(ctx, n); return err },
		"delete": func(n string) error { return c.DeleteSchedule(ctx, n) },
		"pause":  func(n string) error { _, err := c.PauseSchedule(ctx, n); return err },
		"resume": func(n string) error { _, err := c.ResumeSchedule(ctx, n); return err },
		"run":    func(n string) error { _, err := c.RunSchedule(ctx, n); return err },
		"next":   func(n string) error { _, err := c.NextDue(ctx, n, 3); return err },
	} {
		if err := call("Not/A/Name"); rdq.ErrorCode(err) != rdq.CodeInvalidScheduleName {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
}

func fieldOf(err error) string {
	var e *rdq.Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

func TestAWorkerRefusesTwoSchedulesOfOneNameBeforeAnyRequest(t *testing.T) {
	c, requests := countingServer(t)
	task := rdq.ScheduleTask{Queue: "q", HandlerRef: "h"}
	_, err := rdq.NewWorker(c, rdq.WorkerConfig{Queues: []string{"q"}, Registry: rdq.NewRegistry(), Schedules: []rdq.Schedule{
		rdq.CronSchedule("twice", "* * * * *", task),
		rdq.EverySchedule("once", time.Minute, task),
		rdq.EverySchedule("twice", time.Minute, task),
	}})
	if !rdq.IsCode(err, rdq.CodeInvalidArgument) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("two of one name: %v", err)
	}
	_, err = rdq.NewWorker(c, rdq.WorkerConfig{Queues: []string{"q"}, Registry: rdq.NewRegistry(), Schedules: []rdq.Schedule{
		rdq.CronSchedule("Bad Name", "* * * * *", task),
	}})
	if !rdq.IsCode(err, rdq.CodeInvalidScheduleName) {
		t.Fatalf("a bad name: %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
}
