package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/task"
)

//go:embed firepoison.lua
var firePoisonLua string

var firePoisonScript = script(firePoisonLua)

// Poison is a task of a take that Kafka refused for good, for SettlePoison.
type Poison struct {
	ID  string
	Gen uint64
	// DeadAfter is the earliest time, by Redis' clock, at which the task
	// may be made dead; zero: park it only.
	DeadAfter time.Time
	// Park is how long the task waits before it is taken again when it is
	// not made dead.
	Park time.Duration
	// Reason is the dead task's last error (cut to 2 KiB).
	Reason string
}

// PoisonOutcome is what SettlePoison did with one task.
type PoisonOutcome int

const (
	// PoisonLeft: nothing; the take's lease is gone (re-claimed or
	// adopted) or the task changed since the take.
	PoisonLeft PoisonOutcome = iota
	// PoisonDead: the task is dead (state, dead set and last error
	// written as a worker's dead outcome writes them).
	PoisonDead
	// PoisonParked: the task is back in the due set, due again after Park
	// (its record, due time included, untouched).
	PoisonParked
)

// SettlePoison settles the tasks of a take (named by its lease, see
// Taken.Lease) that Kafka refused for good: each is made dead when its
// DeadAfter has passed by Redis' clock, else parked for Park. It must run
// before the take's Settle, which must not release these tasks again. Fenced
// like every leader transition (ErrFenced).
func (s *Store) SettlePoison(ctx context.Context, shard int, token int64, lease string, tasks []Poison) ([]PoisonOutcome, error) {
	out := make([]PoisonOutcome, 0, len(tasks))
	for len(tasks) > 0 {
		part := tasks[:min(len(tasks), maxPerCall)]
		tasks = tasks[len(part):]
		args := make([]any, 0, 5+5*len(part))
		args = append(args, token, s.k.prefix[shard], lease, s.k.wake, shard)
		for _, p := range part {
			var nb int64
			if !p.DeadAfter.IsZero() {
				nb = max(p.DeadAfter.UnixMilli(), 1)
			}
			args = append(args, p.ID, p.Gen, nb, max(p.Park.Milliseconds(), 1), task.Clip(p.Reason, 2048))
		}
		v, err := s.run(ctx, firePoisonScript,
			[]string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard), s.k.dead(shard), s.k.errs(shard), s.k.done(shard), s.k.runs(shard)}, args...)
		if err != nil {
			return out, fmt.Errorf("settle poison shard %d: %w", shard, err)
		}
		if err := fencedErr(v); err != nil {
			return out, err
		}
		a, _ := v.([]any)
		if len(a) != len(part) {
			return out, fmt.Errorf("settle poison shard %d: unexpected reply %v", shard, v)
		}
		for _, c := range a {
			code, _ := c.(int64)
			out = append(out, PoisonOutcome(code))
		}
	}
	return out, nil
}
