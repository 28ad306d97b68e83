package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

//go:embed reschedule.lua
var rescheduleLua string

//go:embed cancel.lua
var cancelLua string

var (
	rescheduleScript = script(rescheduleLua)
	cancelScript     = script(cancelLua)
)

// Reschedule moves a waiting task (scheduled or retrying) to a new due time:
// DueAt, or with relative, Redis' clock + delay. It returns the new due time;
// ErrNotFound, or a *StateError when the task is no longer waiting.
func (s *Store) Reschedule(ctx context.Context, id string, dueAt time.Time, delay time.Duration, relative bool) (time.Time, error) {
	sh := s.Shard(id)
	v, err := s.run(ctx, rescheduleScript, []string{s.k.due(sh), s.k.bucket(sh, id)},
		id, dueArg(dueAt, delay, relative), s.k.wake, sh)
	if err != nil {
		return time.Time{}, fmt.Errorf("reschedule %s: %w", id, err)
	}
	due, err := codeResult(id, v)
	return due, s.firedOrFiring(ctx, err)
}

// firedOrFiring refines a conflict on state firing into fired when the
// task holds no lease any more (see refineFiring).
func (s *Store) firedOrFiring(ctx context.Context, err error) error {
	var se *StateError
	if errors.As(err, &se) && se.State == task.StateFiring {
		s.refineFiring(ctx, []Result{{ID: se.ID, Shard: s.Shard(se.ID), State: se.State, Err: err}})
	}
	return err
}

// Cancel cancels a waiting task. Its record stays readable for the
// retention period. ErrNotFound, or a *StateError when it is no longer waiting.
func (s *Store) Cancel(ctx context.Context, id string) error {
	sh := s.Shard(id)
	v, err := s.run(ctx, cancelScript, []string{s.k.due(sh), s.k.bucket(sh, id), s.k.done(sh)},
		id, s.retention.Milliseconds())
	if err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	_, err = codeResult(id, v)
	return s.firedOrFiring(ctx, err)
}

// Get reads one task with its state and last error.
func (s *Store) Get(ctx context.Context, id string) (*task.Task, error) {
	sh := s.Shard(id)
	var rec, lastErr *redis.StringCmd
	var lease *redis.FloatCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, s.k.bucket(sh, id), id)
		lastErr = p.HGet(ctx, s.k.errs(sh), id)
		lease = p.ZScore(ctx, s.k.inflight(sh), id)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	v, err := rec.Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	t, err := decodeRecord(id, v, sh)
	if err != nil {
		return nil, err
	}
	t.LastError, _ = lastErr.Result()
	if t.State == task.StateFiring && errors.Is(lease.Err(), redis.Nil) {
		// The ack keeps state f and only drops the lease (see ack.lua).
		t.State = task.StateFired
	}
	return t, nil
}

// ShardStats are one shard's figures.
type ShardStats struct {
	Shard       int        `json:"shard"`
	Scheduled   int64      `json:"scheduled"` // waiting in the due set (scheduled or retrying)
	Firing      int64      `json:"firing"`
	Dead        int64      `json:"dead"`
	EarliestDue *time.Time `json:"earliest_due,omitempty"`
	Token       int64      `json:"leader_token"`
}

// Stats reads every shard's figures in one pipeline.
func (s *Store) Stats(ctx context.Context) ([]ShardStats, error) {
	n := s.k.shards
	type cmds struct {
		due, inflight, dead *redis.IntCmd
		head                *redis.ZSliceCmd
		fence               *redis.StringCmd
	}
	cs := make([]cmds, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cs[i] = cmds{
				due:      p.ZCard(ctx, s.k.due(i)),
				inflight: p.ZCard(ctx, s.k.inflight(i)),
				dead:     p.ZCard(ctx, s.k.dead(i)),
				head:     p.ZRangeWithScores(ctx, s.k.due(i), 0, 0),
				fence:    p.Get(ctx, s.k.fence(i)),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]ShardStats, n)
	for i, c := range cs {
		st := ShardStats{Shard: i, Scheduled: c.due.Val(), Firing: c.inflight.Val(), Dead: c.dead.Val()}
		if h := c.head.Val(); len(h) == 1 {
			t := task.FromMillis(int64(h[0].Score))
			st.EarliestDue = &t
		}
		st.Token, _ = c.fence.Int64()
		out[i] = st
	}
	return out, nil
}
