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

//go:embed schedule.lua
var scheduleLua string

var scheduleScript = script(scheduleLua)

// maxPerCall bounds the tasks one script call handles (Redis runs scripts
// one at a time; long ones stall every other client).
const maxPerCall = 200

// Submit is one task to schedule. With Relative, the due time is Redis'
// clock + Delay when the script runs (so no process clock is involved);
// otherwise Task.DueAt.
type Submit struct {
	Task     *task.Task
	Delay    time.Duration
	Relative bool
}

// Outcome says what Schedule did with one task.
type Outcome int

// The outcomes of Schedule.
const (
	Created   Outcome = 1 // new task
	Unchanged Outcome = 2 // identical re-submit: nothing changed
	Updated   Outcome = 3 // the task was waiting and took the new content or due time
	Rejected  Outcome = 4 // exists in another state with other content (Err is a *StateError)
)

func (o Outcome) String() string {
	switch o {
	case Created:
		return "created"
	case Unchanged:
		return "unchanged"
	case Updated:
		return "updated"
	case Rejected:
		return "rejected"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is the outcome for one submitted task.
type Result struct {
	ID      string
	Outcome Outcome
	State   task.State
	DueAt   time.Time
	Shard   int
	Err     error
}

// Schedule creates or upserts tasks (idempotent by id). Tasks are grouped by
// shard, at most maxPerCall per script call, and all calls go out in one
// pipeline. The returned slice has one result per submit, in order. A
// non-nil error means Redis could not be reached or answered wrongly for at
// least one group; the results of that group carry the error too.
func (s *Store) Schedule(ctx context.Context, subs []Submit) ([]Result, error) {
	res := make([]Result, len(subs))
	type group struct {
		shard int
		idx   []int
	}
	var groups []*group
	open := make(map[int]*group)
	for i, sub := range subs {
		sh := s.Shard(sub.Task.ID)
		res[i] = Result{ID: sub.Task.ID, Shard: sh}
		g := open[sh]
		if g == nil || len(g.idx) == maxPerCall {
			g = &group{shard: sh}
			open[sh] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	type call struct {
		g    *group
		keys []string
		args []any
	}
	calls := make([]call, len(groups))
	for ci, g := range groups {
		keys := make([]string, 0, 1+len(g.idx))
		args := make([]any, 0, 2+3*len(g.idx))
		keys = append(keys, s.k.due(g.shard))
		args = append(args, s.k.wake, g.shard)
		for _, i := range g.idx {
			t := subs[i].Task
			keys = append(keys, s.k.bucket(g.shard, t.ID))
			args = append(args, t.ID, dueArg(t.DueAt, subs[i].Delay, subs[i].Relative), task.EncodeBody(t))
		}
		calls[ci] = call{g: g, keys: keys, args: args}
	}
	cmds := make([]*redis.Cmd, len(calls))
	// Per-command errors are examined below; the pipeline's own error is the first of them.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = scheduleScript.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	var firstErr error
	for ci, c := range calls {
		v, err := cmds[ci].Result()
		if isNoScript(err) {
			// after a Redis restart or failover the script cache is empty
			v, err = scheduleScript.Run(ctx, s.rdb, c.keys, c.args...).Result()
		}
		if err == nil {
			err = s.fillSchedule(res, c.g.idx, v)
		}
		if err != nil {
			err = fmt.Errorf("schedule on shard %d: %w", c.g.shard, err)
			for _, i := range c.g.idx {
				res[i].Err = err
			}
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return res, firstErr
}

func (s *Store) fillSchedule(res []Result, idx []int, v any) error {
	a, ok := v.([]any)
	if !ok || len(a) != 3*len(idx) {
		return fmt.Errorf("unexpected schedule reply of %d items for %d tasks", len(a), len(idx))
	}
	for j, i := range idx {
		r, err := parseReply(a, 3*j)
		if err != nil {
			return err
		}
		res[i].Outcome = Outcome(r.code)
		res[i].State = r.state
		res[i].DueAt = r.due
		if r.code == int64(Rejected) {
			res[i].Err = conflict(res[i].ID, r)
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// run runs a script with EVALSHA, falling back to EVAL when Redis lost its
// script cache.
func (s *Store) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	v, err := sc.Run(ctx, s.rdb, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}
