package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

// TestAttemptsAndInFlight: a task a worker runs is listed by InFlight
// with its claim's owner and deadline; its ended attempts come back with
// Get, and not with the lists.
func TestAttemptsAndInFlight(t *testing.T) {
	url, st := startDaemon(t, "tok")
	c := client.New(url, client.WithToken("tok"))
	ctx := t.Context()
	if _, err := c.Schedule(ctx, client.Task{ID: "r1", Type: "mail"}); err != nil {
		t.Fatal(err)
	}
	// run claims r1 as a worker does: the generation it runs
	run := func(owner string) uint64 {
		t.Helper()
		var gen uint64
		testenv.WaitFor(t, 5*time.Second, "r1 taken", func() bool {
			tk, err := st.Take(ctx, st.Shard("r1"), 1, 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tk.Tasks {
				if x.ID == "r1" {
					gen = x.Gen
					return true
				}
			}
			return false
		})
		res, err := st.ClaimMany(ctx, []redisstore.Claim{{ID: "r1", Gen: gen, TTL: time.Minute, Owner: owner}})
		if err != nil || res[0].Code != redisstore.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		return gen
	}
	started := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	gen := run("wp-a:1")
	fl, err := c.InFlight(ctx, 0)
	if err != nil || fl.Truncated || len(fl.Tasks) != 1 {
		t.Fatalf("in flight: %+v %v", fl, err)
	}
	if f := fl.Tasks[0]; f.ID != "r1" || f.Type != "mail" || f.Attempt != 1 || f.Owner != "wp-a:1" || f.Shard != st.Shard("r1") ||
		f.ExpiresAt.Before(time.Now().Add(30*time.Second)) || f.ExpiresAt.After(time.Now().Add(2*time.Minute)) {
		t.Fatalf("in flight: %+v", f)
	}
	if _, err := st.Finish(ctx, redisstore.Finish{ID: "r1", Gen: gen, Kind: redisstore.Retry, Relative: true, Error: "timeout <5s>", Owner: "wp-a:1", Attempt: 1, Started: started}); err != nil {
		t.Fatal(err)
	}
	gen = run("wp-b:2")
	if _, err := st.Finish(ctx, redisstore.Finish{ID: "r1", Gen: gen, Kind: redisstore.Succeeded, Owner: "wp-b:2", Attempt: 2, Started: started}); err != nil {
		t.Fatal(err)
	}
	if fl, err := c.InFlight(ctx, 1000); err != nil || len(fl.Tasks) != 0 || fl.Truncated {
		t.Fatalf("in flight after the outcome: %+v %v", fl, err)
	}
	ti, err := c.Get(ctx, "r1")
	if err != nil || ti.State != client.StateSucceeded || ti.LastError != "" || len(ti.Attempts) != 2 || ti.AttemptsDropped != 0 {
		t.Fatalf("get: %+v %v", ti, err)
	}
	a1, a2 := ti.Attempts[0], ti.Attempts[1]
	if a1.Attempt != 1 || a1.Outcome != client.AttemptRetry || a1.Error != "timeout <5s>" || !a1.StartedAt.Equal(started) || a1.EndedAt.Before(started) {
		t.Fatalf("attempt 1: %+v", a1)
	}
	if a2.Attempt != 2 || a2.Outcome != client.AttemptSucceeded || a2.Error != "" || !a2.StartedAt.Equal(started) || a2.EndedAt.Before(a1.EndedAt) {
		t.Fatalf("attempt 2: %+v", a2)
	}
	page, err := c.ListTasks(ctx, client.ListOptions{State: client.StateSucceeded})
	if err != nil || len(page.Tasks) != 1 || page.Tasks[0].Attempts != nil {
		t.Fatalf("list: %+v %v", page, err)
	}
	var apiErr *client.APIError
	if _, err := c.InFlight(ctx, 1001); !errors.As(err, &apiErr) || apiErr.Status != 422 {
		t.Fatalf("limit 1001: %v", err)
	}
}
