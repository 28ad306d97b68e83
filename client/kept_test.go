package client_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/client"
)

// TestScheduleKept: a re-submit that keeps the earlier due time, or finds
// the task ended, is still no error (an idempotent re-submit), and the
// result says so: KeptDueAt, Ended; alone and in a batch.
func TestScheduleKept(t *testing.T) {
	url, _ := startDaemon(t, "")
	ctx := t.Context()
	c := client.New(url)

	first, err := c.Schedule(ctx, client.Task{ID: "k1", Type: "x", Delay: time.Hour})
	if err != nil || first.Outcome != "created" || first.KeptDueAt() || first.Ended() || first.Kept != "" {
		t.Fatalf("create: %+v %v", first, err)
	}
	again, err := c.Schedule(ctx, client.Task{ID: "k1", Type: "x", Delay: 3 * time.Hour})
	if err != nil || again.Outcome != "unchanged" || !again.KeptDueAt() || again.Ended() || !again.DueAt.Equal(first.DueAt) {
		t.Fatalf("another delay: %+v %v (first %+v)", again, err, first)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if r, err := c.Schedule(ctx, client.Task{ID: "k2", Type: "x", DueAt: due}); err != nil || r.Outcome != "created" {
		t.Fatalf("create k2: %+v %v", r, err)
	}
	if r, err := c.Schedule(ctx, client.Task{ID: "k2", Type: "x", DueAt: due}); err != nil || r.Outcome != "unchanged" || r.KeptDueAt() || r.Ended() {
		t.Fatalf("same due_at: %+v %v", r, err)
	}
	if err := c.Cancel(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Schedule(ctx, client.Task{ID: "k2", Type: "x", DueAt: due})
	if err != nil || r.Outcome != "unchanged" || r.State != "cancelled" || !r.Ended() || r.Kept != client.KeptState {
		t.Fatalf("re-submit cancelled: %+v %v", r, err)
	}

	rs, err := c.ScheduleBatch(ctx, []client.Task{
		{ID: "k1", Type: "x", Delay: 5 * time.Hour},
		{ID: "k2", Type: "x", DueAt: due},
		{ID: "k3", Type: "x", Delay: time.Hour},
	})
	if err != nil || len(rs) != 3 {
		t.Fatalf("batch: %+v %v", rs, err)
	}
	if b := rs[0]; b.Err != nil || !b.KeptDueAt() || b.Kept != client.KeptDueAt || !b.DueAt.Equal(first.DueAt) {
		t.Fatalf("batch k1: %+v", b)
	}
	if b := rs[1]; b.Err != nil || !b.Ended() || b.State != "cancelled" {
		t.Fatalf("batch k2: %+v", b)
	}
	if b := rs[2]; b.Err != nil || b.Outcome != "created" || b.Kept != "" {
		t.Fatalf("batch k3: %+v", b)
	}
}
