package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// The worker's transitions: a fired task's outcome, and the dead set.

//go:embed finish.lua
var finishLua string

//go:embed redrive.lua
var redriveLua string

//go:embed purgedead.lua
var purgeDeadLua string

var (
	finishScript    = script(finishLua)
	redriveScript   = script(redriveLua)
	purgeDeadScript = script(purgeDeadLua)
)

// Kind is what a worker reports for one fired task.
type Kind string

// The outcomes a worker reports.
const (
	Succeeded Kind = "S" // handler finished
	Retry     Kind = "r" // failed: run again at Due with attempt+1
	Defer     Kind = "w" // held back (rate limit): run again at Due, same attempt
	Dead      Kind = "d" // failed for good
)

// Finish is one worker outcome.
type Finish struct {
	ID       string
	Gen      uint64
	Kind     Kind
	Due      time.Time     // for Retry and Defer (absolute)
	Delay    time.Duration // for Retry and Defer when Relative
	Relative bool          // Due is Redis' clock + Delay
	Error    string        // last error, kept with Retry and Dead
	// Attempt and Started are the attempt the worker ran and when it
	// began running it (zero: unknown), for the task's attempt history
	// (Succeeded, Retry, Dead; a deferral uses no attempt). The history
	// takes the record's attempt wherever the script reads the record; a
	// lean success (see common.lua) reads none and takes Attempt.
	Attempt int
	Started time.Time
	// Owner, when set, is the value the worker's execution claim (run
	// marker, see ClaimMany) holds: the same script call deletes the
	// marker if it still holds Owner, whatever the outcome's code, so
	// that a worker needs no separate release.
	Owner string
	// Shard is the shard the task was fired from: the dq-shard header of
	// its Kafka copy, or the Task.Shard a claim returned. A fired task
	// stays on that shard until it is finished, also while the shard map
	// grows. Set ShardSet with it; without, the shard the store's map
	// gives the id is used (wrong for a task fired from its old shard
	// while the map grows).
	Shard    int
	ShardSet bool
}

// Finish records a worker's outcome for a fired task. It returns the new
// state; ErrNotFound; ErrStale when the task was fired again since (the
// record has another generation); or a *StateError when the task already
// finished (a duplicate delivery).
func (s *Store) Finish(ctx context.Context, f Finish) (task.State, error) {
	res, err := s.FinishMany(ctx, []Finish{f})
	if err != nil {
		return "", err
	}
	return res[0].State, res[0].Err
}

// FinishResult is the answer for one Finish of FinishMany.
type FinishResult struct {
	State task.State
	// Err is what Finish would return: ErrNotFound, ErrStale, a
	// *StateError, or a Redis error (IsUnavailable: outcome unknown, retry).
	Err error
}

// FinishMany stores many outcomes (and gives up the execution claims of
// those with an Owner): one finish script call for the shards of one
// redis-server (one per shard on a Redis Cluster; at most maxPerCall
// outcomes a call, see packCalls), all in one pipeline. Results are in the
// order of fs. The error is the first Redis error (not ErrStale,
// ErrNotFound or a conflict, which are per task); the tasks of a call that
// failed carry it too.
func (s *Store) FinishMany(ctx context.Context, fs []Finish) ([]FinishResult, error) {
	res := make([]FinishResult, len(fs))
	secs := chunks(indexes(len(fs)), func(i int) int { return s.firedShard(fs[i].ID, fs[i].Shard, fs[i].ShardSet) })
	calls := s.packShards(secs, []any{s.retention.Milliseconds(), s.k.wake}, func(sec *chunk[int], c *shardCall) {
		sh := sec.key
		c.keys = append(c.keys, s.k.runs(sh), s.k.due(sh), s.k.done(sh), s.k.dead(sh), s.k.errs(sh))
		c.args = append(c.args, sh, s.k.prefix[sh], len(sec.idx))
		for _, i := range sec.idx {
			f := fs[i]
			// a success needs five values; the other outcomes their due
			// time and error text too (see finish.lua)
			c.args = append(c.args, f.ID, f.Gen, f.Owner, string(f.Kind), runArg(f))
			if f.Kind != Succeeded {
				due := ""
				if f.Kind != Dead {
					due = dueArg(f.Due, f.Delay, f.Relative)
				}
				c.args = append(c.args, due, task.Clip(f.Error, 2048))
			}
		}
	})
	s.execCalls(ctx, finishScript, calls)
	err := fanOut(calls, "finish", func(c *shardCall) error { return fillFinishes(res, fs, c) },
		func(i int, err error) { res[i].Err = err })
	return res, err
}

// runArg packs the attempt and start of a run for finish.lua: the
// history entry's first 8 bytes (uint16 attempt, uint48 ms, big-endian;
// see history_append in common.lua). A success at the first attempt has
// none (""): the hot path's lean success then writes no history at all
// (see finish.lua).
func runArg(f Finish) string {
	if f.Kind == Succeeded && f.Attempt <= 1 {
		return ""
	}
	var ms int64
	if !f.Started.IsZero() {
		ms = max(f.Started.UnixMilli(), 0)
	}
	a := uint16(min(max(f.Attempt, 0), 0xffff))
	return string([]byte{byte(a >> 8), byte(a), byte(ms >> 40), byte(ms >> 32), byte(ms >> 24), byte(ms >> 16), byte(ms >> 8), byte(ms)})
}

// fillFinishes reads one finish call's reply into the results of its
// tasks: {code, state, due} per task (finish.lua).
func fillFinishes(res []FinishResult, fs []Finish, c *shardCall) error {
	a, ok := c.val.([]any)
	if !ok || len(a) != 3*len(c.idx) {
		return fmt.Errorf("unexpected finish reply %v", c.val)
	}
	for j, i := range c.idx {
		f := fs[i]
		r, err := parseReply(a, 3*j)
		if err != nil {
			res[i].Err = err
			continue
		}
		res[i].State = r.state
		switch r.code {
		case 1:
		case 0:
			res[i].Err = ErrNotFound
		case 5:
			res[i].Err = fmt.Errorf("finish %s gen %d: %w", f.ID, f.Gen, ErrStale)
		default:
			res[i].Err = conflict(f.ID, r)
		}
	}
	return nil
}

// Redrive schedules a dead task again now with a fresh set of attempts.
func (s *Store) Redrive(ctx context.Context, id string) (time.Time, error) {
	v, err := s.byID(ctx, id, func(m shardmap.Map, sh int) (any, error) {
		return s.run(ctx, redriveScript, []string{s.k.dead(sh), s.k.due(sh), s.k.bucket(sh, id), s.k.errs(sh), s.k.stamp(sh), s.k.done(sh)},
			id, s.k.wake, sh, stamp(m))
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("redrive %s: %w", id, err)
	}
	return codeResult(id, v)
}

// DeleteDead removes a dead task for good.
func (s *Store) DeleteDead(ctx context.Context, id string) error {
	v, err := s.byID(ctx, id, func(m shardmap.Map, sh int) (any, error) {
		return s.run(ctx, purgeDeadScript, []string{s.k.dead(sh), s.k.bucket(sh, id), s.k.errs(sh), s.k.stamp(sh), s.k.receipts(sh)}, id, stamp(m))
	})
	if err != nil {
		return fmt.Errorf("delete dead %s: %w", id, err)
	}
	_, err = codeResult(id, v)
	return err
}

func codeResult(id string, v any) (time.Time, error) {
	r, err := parseReply(v, 0)
	if err != nil {
		return time.Time{}, err
	}
	switch r.code {
	case 1:
		return r.due, nil
	case 0:
		return time.Time{}, ErrNotFound
	default:
		return time.Time{}, conflict(id, r)
	}
}

// ListDead returns up to limit dead tasks, most recent first, with the time
// they died and their last error.
func (s *Store) ListDead(ctx context.Context, limit int) ([]DeadTask, error) {
	if limit <= 0 {
		limit = 100
	}
	n := s.Map().Count
	heads := make([]*redis.ZSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			heads[i] = p.ZRevRangeWithScores(ctx, s.k.dead(i), 0, int64(limit-1))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list dead: %w", err)
	}
	var all []DeadTask
	for i, h := range heads {
		for _, z := range h.Val() {
			id, _ := z.Member.(string)
			all = append(all, DeadTask{DiedAt: task.FromMillis(int64(z.Score)), Task: &task.Task{ID: id, Shard: i}})
		}
	}
	// most recent first across shards
	slices.SortStableFunc(all, func(a, b DeadTask) int { return b.DiedAt.Compare(a.DiedAt) })
	if len(all) > limit {
		all = all[:limit]
	}
	for i := range all {
		t, err := s.getTask(ctx, all[i].Task.ID, false)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		all[i].Task = t
	}
	return all, nil
}

// DeadTask is one entry of the dead set.
type DeadTask struct {
	Task   *task.Task
	DiedAt time.Time
}
