package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestSettlePoison: a task Kafka refused for good is parked (record and due
// time untouched, back in the due set later) while its grace runs, is never
// made dead before its DeadAfter by Redis' clock, and then is dead exactly
// as a worker's dead outcome writes it: GET, the dead listing and redrive
// see it. A deposed leader is fenced; a take whose lease is gone is left
// alone.
func TestSettlePoison(t *testing.T) {
	t.Parallel()
	settlePoison(t, testenv.StartRedis(t).Client(t))
}

func TestSettlePoisonCluster(t *testing.T) {
	t.Parallel()
	settlePoison(t, testenv.StartRedisCluster(t).Client(t))
}

func settlePoison(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 1})
	ctx := t.Context()
	now := redisNow(t, s)
	schedule1(t, s, mk("poison-1", now.Add(-time.Second).Truncate(time.Millisecond)))
	schedule1(t, s, mk("poison-2", now.Add(-time.Second).Truncate(time.Millisecond)))
	tk := mustTake(t, s, 0, 7)
	if len(tk.Tasks) != 2 {
		t.Fatalf("took %d tasks, want 2", len(tk.Tasks))
	}
	gen := tk.Tasks[0].Gen
	due := tk.Tasks[0].DueAt

	// Not yet: DeadAfter in the future (Redis' clock) parks instead.
	out, err := s.SettlePoison(ctx, 0, 7, tk.Lease, []Poison{
		{ID: "poison-1", Gen: gen, DeadAfter: now.Add(time.Hour), Park: 300 * time.Millisecond, Reason: "early"},
		{ID: "poison-2", Gen: gen + 1, DeadAfter: now.Add(-time.Hour), Park: time.Millisecond, Reason: "stale gen"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != PoisonParked || out[1] != PoisonLeft {
		t.Fatalf("outcomes %v, want parked, left (stale generation)", out)
	}
	if _, _, err := s.Settle(ctx, 0, 7, tk.Lease, []Fired{{ID: "poison-2", Gen: gen}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "poison-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.StateScheduled || !got.DueAt.Equal(due) || got.Gen != gen {
		t.Fatalf("parked task: state %s due %v gen %d, want scheduled at %v gen %d", got.State, got.DueAt, got.Gen, due, gen)
	}
	if next := mustTake(t, s, 0, 7); len(next.Tasks) != 1 || next.Tasks[0].ID != "poison-2" {
		t.Fatalf("a parked task was taken again before its park ran out: %d tasks", len(next.Tasks))
	}
	var again Taken
	testenv.WaitFor(t, 5*time.Second, "parked task due again", func() bool {
		again = mustTake(t, s, 0, 7)
		return len(again.Tasks) == 1 && again.Tasks[0].ID == "poison-1"
	})

	// A deposed leader cannot touch it.
	if _, err := s.SettlePoison(ctx, 0, 6, again.Lease, []Poison{{ID: "poison-1", Gen: gen, DeadAfter: now, Park: time.Second}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale token: %v, want ErrFenced", err)
	}
	// A lease that is gone: nothing happens.
	if out, err := s.SettlePoison(ctx, 0, 7, "999:1", []Poison{{ID: "poison-1", Gen: gen, DeadAfter: now, Park: time.Second}}); err != nil || out[0] != PoisonLeft {
		t.Fatalf("unknown lease: %v %v, want left alone", out, err)
	}

	reason := `kafka refused the record for topic "some.missing.topic": unknown_topic`
	out, err = s.SettlePoison(ctx, 0, 7, again.Lease, []Poison{{ID: "poison-1", Gen: gen, DeadAfter: redisNow(t, s), Park: time.Second, Reason: reason}})
	if err != nil || out[0] != PoisonDead {
		t.Fatalf("grace over: %v %v, want dead", out, err)
	}
	if _, _, err := s.Settle(ctx, 0, 7, again.Lease, nil); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, "poison-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.StateDead || got.LastError != reason || got.Gen != gen {
		t.Fatalf("dead task: state %s error %q gen %d", got.State, got.LastError, got.Gen)
	}
	dead, err := s.ListDead(ctx, 10)
	if err != nil || len(dead) != 1 || dead[0].Task.ID != "poison-1" || !strings.Contains(dead[0].Task.LastError, "some.missing.topic") {
		t.Fatalf("dead listing: %v %v", dead, err)
	}
	if _, err := s.Redrive(ctx, "poison-1"); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	redriven := mustTake(t, s, 0, 7)
	if len(redriven.Tasks) != 1 || redriven.Tasks[0].Gen != gen+1 || redriven.Tasks[0].Attempt != 1 {
		t.Fatalf("redriven task not taken with the next generation: %+v", redriven.Tasks)
	}
}
