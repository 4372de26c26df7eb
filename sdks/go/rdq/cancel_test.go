package rdq_test

import (
	"context"
	"testing"

	"rdq.dev/sdk/go/envelope"
	"rdq.dev/sdk/go/rdq"
)

func TestPendingTasksAreCancelledListedAndRedrivenByReason(t *testing.T) {
	forEachStore(t, func(t *testing.T, c *rdq.Client, url string) {
		ctx := context.Background()
		q := queueName(t)
		var ids []string
		for _, tenant := range []string{"acme", "acme", "globex"} {
			ids = append(ids, submit(t, c, rdq.Task{Queue: q, HandlerRef: "report", Headers: map[string]string{"tenant": tenant}}).ID)
		}
		page, err := c.ListTasks(ctx, q, rdq.TaskListOptions{Status: envelope.StatusPending, Header: "tenant=acme"})
		if err != nil || len(page.Items) != 2 || page.Items[0].ID != ids[1] {
			t.Fatalf("list: %v, %+v", err, page.Items)
		}
		dry, err := c.Cancel(ctx, q, rdq.CancelRequest{Headers: map[string]string{"tenant": "acme"}, DryRun: true})
		if err != nil || !dry.DryRun || len(dry.IDs) != 2 || dry.IDs[0] != ids[0] {
			t.Fatalf("dry run: %v, %+v", err, dry)
		}
		done, err := c.Cancel(ctx, q, rdq.CancelRequest{IDs: ids[:1], Message: "duplicate"})
		if err != nil || done.Count != 1 {
			t.Fatalf("cancel: %v, %+v", err, done)
		}
		if _, err := c.Cancel(ctx, q, rdq.CancelRequest{IDs: ids[:1]}); rdq.ErrorCode(err) != "INVALID_TRANSITION" {
			t.Fatalf("cancelling twice: %v", err)
		}
		dead, err := c.DLQList(ctx, q, rdq.DLQListOptions{Reason: envelope.DeadReasonCancelled})
		if err != nil || len(dead.Items) != 1 {
			t.Fatalf("dead: %v, %+v", err, dead.Items)
		}
		r := dead.Items[0].DeadReason
		if r == nil || r.Code != envelope.DeadReasonCancelled || r.Message == nil || *r.Message != "duplicate" {
			t.Fatalf("reason: %+v", r)
		}
		counts, err := c.DLQReasons(ctx, q)
		if err != nil || len(counts) != 1 || counts[0] != (rdq.ReasonCount{Reason: "CANCELLED", Count: 1}) {
			t.Fatalf("reasons: %v, %+v", err, counts)
		}
		if _, err := c.DLQList(ctx, q, rdq.DLQListOptions{Reason: "cancelled"}); rdq.ErrorCode(err) != "INVALID_ARGUMENT" {
			t.Fatalf("an unknown reason: %v", err)
		}
		back, err := c.DLQRedrive(ctx, q, rdq.RedriveRequest{Reason: envelope.DeadReasonCancelled})
		if err != nil || back.Count != 1 {
			t.Fatalf("redrive: %v, %+v", err, back)
		}
		env, err := c.Get(ctx, ids[0])
		if err != nil || env.Status != envelope.StatusPending || env.DeadReason != nil {
			t.Fatalf("after redrive: %v, %+v", err, env)
		}
	})
}
