package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// A leader produced a take to Kafka and died before its settle; the new
// leader adopts the shard. The copies in Kafka are fired tasks: a cancel
// (or reschedule) must answer a conflict until they are settled, not 200
// while a worker claims and runs the copy (integration grow_shards_kill:
// "cancelled task ... fired").
func TestAdoptedTakeIsNotCancellable(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newStore(t, r.Client(t), Options{Shards: 1})
	ctx := t.Context()
	due := time.Now().Add(-time.Millisecond)
	schedule1(t, s, mk("ran", due))
	schedule1(t, s, mk("copy", due))
	first, err := s.Take(ctx, 0, 1, 10, time.Hour) // produced; the leader dies before settling
	if err != nil || len(first.Tasks) != 2 {
		t.Fatalf("take: %+v %v", first, err)
	}
	gen := map[string]uint64{}
	for _, tk := range first.Tasks {
		gen[tk.ID] = tk.Gen
	}
	if _, err := s.Adopt(ctx, 0, 2); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	// a worker claims the Kafka copy of "ran" and runs it
	res, err := s.ClaimMany(ctx, []Claim{{ID: "ran", Gen: gen["ran"], TTL: time.Minute, Owner: "w:1", Due: first.Tasks[0].DueAt, Shard: 0, ShardSet: true}})
	if err != nil || res[0].Code != Claimed {
		t.Fatalf("claim of the Kafka copy: %+v %v", res, err)
	}
	for _, id := range []string{"ran", "copy"} {
		var se *StateError
		if err := s.Cancel(ctx, id); !errors.As(err, &se) || se.State != task.StateFired {
			t.Errorf("cancel of %s, whose copy is in Kafka: %v, want a conflict (fired)", id, err)
		}
		if _, err := s.Reschedule(ctx, id, time.Now().Add(time.Hour), 0, false); !errors.As(err, &se) || se.State != task.StateFired {
			t.Errorf("reschedule of %s, whose copy is in Kafka: %v, want a conflict (fired)", id, err)
		}
	}
	// the new leader fires them again at once, same generation
	again := mustTake(t, s, 0, 2)
	if len(again.Tasks) != 2 || again.Reclaimed != 2 {
		t.Fatalf("new leader's take: %d tasks, %d reclaimed; want both, reclaimed", len(again.Tasks), again.Reclaimed)
	}
	for _, tk := range again.Tasks {
		if tk.Gen != gen[tk.ID] {
			t.Fatalf("%s re-fired as gen %d, want %d", tk.ID, tk.Gen, gen[tk.ID])
		}
	}
}
