package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	return codeResult(id, v)
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
	return err
}

// Get reads one task with its state and last error.
func (s *Store) Get(ctx context.Context, id string) (*task.Task, error) {
	sh := s.Shard(id)
	var rec, lastErr *redis.StringCmd
	var due *redis.FloatCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, s.k.bucket(sh, id), id)
		lastErr = p.HGet(ctx, s.k.errs(sh), id)
		due = p.ZScore(ctx, s.k.due(sh), id)
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
	if (t.State == task.StateScheduled || t.State == task.StateRetrying) && errors.Is(due.Err(), redis.Nil) {
		// A take leaves the record as it is and only drops it from the
		// due set (see common.lua).
		t.State = task.StateFired
	}
	return t, nil
}

// ShardStats are one shard's figures.
type ShardStats struct {
	Shard       int        `json:"shard"`
	Scheduled   int64      `json:"scheduled"` // waiting in the due set (scheduled or retrying)
	Firing      int64      `json:"firing"`    // in takes not settled yet (their lease is running)
	Dead        int64      `json:"dead"`
	EarliestDue *time.Time `json:"earliest_due,omitempty"`
	Token       int64      `json:"leader_token"`
}

// Stats reads every shard's figures in one pipeline.
func (s *Store) Stats(ctx context.Context) ([]ShardStats, error) {
	n := s.k.shards
	type cmds struct {
		due, dead *redis.IntCmd
		head      *redis.ZSliceCmd
		leases    *redis.StringSliceCmd
		fence     *redis.StringCmd
	}
	cs := make([]cmds, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cs[i] = cmds{
				due:    p.ZCard(ctx, s.k.due(i)),
				leases: p.ZRange(ctx, s.k.inflight(i), 0, -1),
				dead:   p.ZCard(ctx, s.k.dead(i)),
				head:   p.ZRangeWithScores(ctx, s.k.due(i), 0, 0),
				fence:  p.Get(ctx, s.k.fence(i)),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]ShardStats, n)
	for i, c := range cs {
		st := ShardStats{Shard: i, Scheduled: c.due.Val(), Firing: leaseTasks(c.leases.Val()), Dead: c.dead.Val()}
		if h := c.head.Val(); len(h) == 1 {
			t := task.FromMillis(int64(h[0].Score))
			st.EarliestDue = &t
		}
		st.Token, _ = c.fence.Int64()
		out[i] = st
	}
	return out, nil
}

// leaseTasks sums the task counts of lease members ("<seq>:<count>").
func leaseTasks(members []string) int64 {
	var n int64
	for _, m := range members {
		if _, c, ok := strings.Cut(m, ":"); ok {
			v, _ := strconv.ParseInt(c, 10, 64)
			n += v
		}
	}
	return n
}
