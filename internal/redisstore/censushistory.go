package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// History (GET /v1/history): how many tasks finished in each step of the
// last window, exact, from the scores of the shards' sorted sets (a ZCOUNT
// per step and set, censuscount.lua, two calls per shard):
//
//   - succeeded: the done set, whose score is the time the record expires,
//     its finish time plus the retention of the process that finished it
//     (a worker's, a daemon's cancel). History takes away this store's
//     retention (Options.Retention): it assumes every process of the
//     namespace runs with the same one. The done set also holds the
//     cancelled tasks, which are counted with the successes: a score does
//     not tell them apart. Steps further back than the retention are
//     empty (their records were purged);
//   - dead: the dead set, whose score is the time the task died.

// HistoryPoint is one step of a History.
type HistoryPoint struct {
	At        time.Time // the step's start
	Succeeded int64     // finished into a done set in [At, At+step): succeeded (and cancelled)
	Dead      int64     // died in [At, At+step)
}

// History counts the tasks that succeeded and died in each step of the
// last window: the steps start at multiples of step (unix time), the last
// one is the step in progress (it ends after now). step must be positive,
// window at least step.
func (s *Store) History(ctx context.Context, window, step time.Duration) ([]HistoryPoint, error) {
	if step <= 0 || window < step {
		return nil, fmt.Errorf("history: window %v and step %v: need 0 < step <= window", window, step)
	}
	n := s.Map().Count
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	st := max(step.Milliseconds(), 1)
	np := int((window.Milliseconds() + st - 1) / st)
	end := (task.Millis(tm)/st + 1) * st
	start := end - int64(np)*st
	ret := s.retention.Milliseconds()
	doneEdges, deadEdges := make([]any, np+1), make([]any, np+1)
	for i := range np + 1 {
		at := start + int64(i)*st
		doneEdges[i] = strconv.FormatInt(at+ret, 10)
		deadEdges[i] = strconv.FormatInt(at, 10)
	}
	calls := make([]*shardCall, 0, 2*n)
	for sh := range n {
		calls = append(calls,
			&shardCall{shard: sh, keys: []string{s.k.done(sh)}, args: doneEdges},
			&shardCall{shard: sh, keys: []string{s.k.dead(sh)}, args: deadEdges})
	}
	if err := s.execBatched(ctx, censusCountScript, calls); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	out := make([]HistoryPoint, np)
	for i := range out {
		out[i].At = task.FromMillis(start + int64(i)*st)
	}
	for i, c := range calls {
		vs, err := int64s(c.val, np)
		if err != nil {
			return nil, fmt.Errorf("history: shard %d: %w", c.shard, err)
		}
		for j, v := range vs {
			if i%2 == 0 {
				out[j].Succeeded += v
			} else {
				out[j].Dead += v
			}
		}
	}
	return out, nil
}
