package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

//go:embed schedule.lua
var scheduleLua string

var scheduleScript = script(scheduleLua)

// Submit is one task to schedule. With Relative, the due time is Redis'
// clock + Delay when the script runs (so no process clock is involved);
// otherwise Task.DueAt.
type Submit struct {
	Task     *task.Task
	Delay    time.Duration
	Relative bool
	// Revive makes a cancelled task of this id waiting again with this
	// content (Updated) instead of answering Unchanged or Rejected: the
	// scheduler re-materializes a tick it cancelled when a schedule was
	// paused or changed and is resumed or changed back.
	Revive bool
	// Confirm replays a write that ran but that the replicas did not
	// confirm (ErrNotReplicated): an absent task is created, an existing
	// one is left as it is (Unchanged) whatever its content, so that a
	// change made since is never undone; the call's WAIT then confirms it.
	Confirm bool
	// Replay is the token of the journal entry a daemon replays (unique
	// to the entry and never reused; ignored with Confirm): the first
	// write of a token writes the task as any schedule does and the shard
	// remembers the token for a day (schedule.lua, mode 'j'); a write of
	// a token the shard has seen is a Confirm. So an entry applied by a
	// daemon that died before it removed it from its journal is not
	// written again over a change made since (a reschedule through
	// another daemon), which made a task fire before its new due time.
	Replay string
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
//
// While the shard map grows, a task whose shard changes is first looked
// for on its old shard (existing tasks only: an idempotent re-submit or an
// upsert is answered where the task lives); the ones absent there are
// created on their new shard in a second round.
func (s *Store) Schedule(ctx context.Context, subs []Submit) ([]Result, error) {
	res := make([]Result, len(subs))
	pending := make([]int, len(subs))
	for i := range subs {
		pending[i] = i
		res[i].ID = subs[i].Task.ID
	}
	forced := map[int]int{} // index -> shard it is known to belong on now
	var firstErr error
	for round := 0; len(pending) > 0; round++ {
		if round == 8 {
			err := fmt.Errorf("schedule: %w", errRelocate)
			for _, i := range pending {
				res[i].Err = err
			}
			return res, err
		}
		m := s.Map()
		calls := s.scheduleCalls(m, subs, pending, forced)
		s.execCalls(ctx, scheduleScript, calls)
		var next []int
		stale := false
		for _, c := range calls {
			err := c.err
			if err == nil {
				err = s.fillSchedule(res, c.idx, c.val)
			}
			if nm, isStale := asStaleMap(err); isStale {
				stale = true
				_ = s.adoptStale(ctx, nm) // a failed reload leaves the map; the next round is refused again or errs
				next = append(next, c.idx...)
				continue
			}
			if err != nil {
				err = fmt.Errorf("schedule on %s: %w", c.where(), err)
				for _, i := range c.idx {
					res[i].Err = err
				}
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			for j, i := range c.idx {
				res[i].Shard = c.shards[j]
				switch res[i].Outcome {
				case codeAbsent: // not on its old shard: create it on its new one
					forced[i] = m.Shard(subs[i].Task.ID)
					next = append(next, i)
				case codeMoved: // half moved: finish the move, then the new shard
					sh, err := s.locate(ctx, m, subs[i].Task.ID)
					if err != nil {
						res[i].Err = err
						if firstErr == nil {
							firstErr = err
						}
						continue
					}
					forced[i] = sh
					next = append(next, i)
				}
			}
		}
		if stale {
			clear(forced) // routed again by the newer map
		}
		pending = next
	}
	return res, firstErr
}

// scheduleCalls groups the pending submits into script sections by target
// shard and mode, and the sections into calls (packCalls): concurrent
// single schedules spread over many shards of one redis-server still cost
// one script call.
func (s *Store) scheduleCalls(m shardmap.Map, subs []Submit, pending []int, forced map[int]int) []*shardCall {
	type gk struct {
		shard int
		mode  string
	}
	secs := chunks(pending, func(i int) gk {
		id := subs[i].Task.ID
		k := gk{shard: m.Shard(id)}
		if sh, ok := forced[i]; ok {
			k.shard = sh
		} else if o, moving := m.Old(id); moving {
			k = gk{shard: o, mode: "x"}
		}
		if subs[i].Revive {
			k.mode += "r"
		}
		if subs[i].Confirm {
			k.mode += "c"
		} else if subs[i].Replay != "" {
			k.mode += "j"
		}
		return k
	})
	st := stamp(m)
	return packCalls(s.pack, secs, func(k gk) int { return k.shard }, []any{s.k.wake}, func(sec *chunk[gk], c *shardCall) {
		sh := sec.key.shard
		c.keys = append(c.keys, s.k.due(sh), s.k.stamp(sh), s.k.done(sh), s.k.runs(sh))
		c.args = append(c.args, sh, st, sec.key.mode, len(sec.idx))
		for _, i := range sec.idx {
			t := subs[i].Task
			b := bucketOf(t.ID)
			c.keys = append(c.keys, s.k.bucketKey(sh, b))
			if subs[i].Relative {
				c.args = append(c.args, t.ID, relScoreArg(subs[i].Delay, b), task.EncodeBody(t))
			} else {
				ms := task.Millis(t.DueAt)
				c.args = append(c.args, t.ID, dueScoreArg(ms, b), newRecord(ms, t))
			}
			if strings.HasSuffix(sec.key.mode, "j") {
				c.args = append(c.args, subs[i].Replay)
			}
		}
	})
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
