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

	"github.com/delayq/delayq/internal/shardmap"
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

// byID runs a by-id script on the shard where id lives under the store's
// map (see locate), again after a stale-map refusal or when the task moved
// meanwhile: the script answered code 7 (on its way), or not found on the
// task's old shard, which the whole move (movestart, movein, then movedone,
// which deletes the old record) may have left between locate's probe and
// the call.
func (s *Store) byID(ctx context.Context, id string, call func(m shardmap.Map, sh int) (any, error)) (any, error) {
	var out any
	err := s.routed(ctx, func(m shardmap.Map) error {
		for range 8 {
			sh, err := s.locate(ctx, m, id)
			if err != nil {
				return err
			}
			v, err := call(m, sh)
			if err != nil {
				return err
			}
			if r, perr := parseReply(v, 0); perr == nil && (r.code == codeMoved || (r.code == codeNotFound && sh != m.Shard(id))) {
				continue
			}
			out = v
			return nil
		}
		return errRelocate
	})
	return out, err
}

// Reschedule moves a waiting task (scheduled or retrying) to a new due time:
// DueAt, or with relative, Redis' clock + delay. It returns the new due time;
// ErrNotFound, or a *StateError when the task is no longer waiting.
func (s *Store) Reschedule(ctx context.Context, id string, dueAt time.Time, delay time.Duration, relative bool) (time.Time, error) {
	v, err := s.byID(ctx, id, func(m shardmap.Map, sh int) (any, error) {
		return s.run(ctx, rescheduleScript, []string{s.k.due(sh), s.k.bucket(sh, id), s.k.stamp(sh), s.k.done(sh), s.k.runs(sh)},
			id, dueArg(dueAt, delay, relative), s.k.wake, sh, stamp(m))
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("reschedule %s: %w", id, err)
	}
	return codeResult(id, v)
}

// Cancel cancels a waiting task. Its record stays readable for the
// retention period. ErrNotFound, or a *StateError when it is no longer waiting.
func (s *Store) Cancel(ctx context.Context, id string) error {
	v, err := s.byID(ctx, id, func(m shardmap.Map, sh int) (any, error) {
		return s.run(ctx, cancelScript, []string{s.k.due(sh), s.k.bucket(sh, id), s.k.done(sh), s.k.stamp(sh), s.k.runs(sh)},
			id, s.retention.Milliseconds(), stamp(m))
	})
	if err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	_, err = codeResult(id, v)
	return err
}

// Get reads one task with its state, last error and attempt history
// (History). While the map grows, a task still on its old shard is read
// there, and one on its way is read from its moving record (as it will
// arrive).
func (s *Store) Get(ctx context.Context, id string) (*task.Task, error) {
	return s.getTask(ctx, id, true)
}

// getTask is Get; history tells whether to decode the attempt history
// (the dead list shows the last error only).
func (s *Store) getTask(ctx context.Context, id string, history bool) (*task.Task, error) {
	var t *task.Task
	err := s.routed(ctx, func(m shardmap.Map) error {
		var err error
		t, err = s.get(ctx, m, id, history)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, task.ErrCorrupt) {
		return t, fmt.Errorf("get %s: %w", id, err)
	}
	return t, err
}

func (s *Store) get(ctx context.Context, m shardmap.Map, id string, history bool) (*task.Task, error) {
	if o, moving := m.Old(id); moving {
		// the old shard first: a task absent there has arrived on its new one
		t, err := s.getOn(ctx, m, o, id, history)
		if !errors.Is(err, ErrNotFound) {
			return t, err
		}
	}
	return s.getOn(ctx, m, m.Shard(id), id, history)
}

// getOn reads id's record on shard sh. The shard's stamp is read along: a
// task not found on a shard stamped by a newer map may have moved.
func (s *Store) getOn(ctx context.Context, m shardmap.Map, sh int, id string, history bool) (*task.Task, error) {
	var rec, lastErr, st, rcpt *redis.StringCmd
	var due, done, dead *redis.FloatCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, s.k.bucket(sh, id), id)
		lastErr = p.HGet(ctx, s.k.errs(sh), id)
		rcpt = p.HGet(ctx, s.k.receipts(sh), id)
		due = p.ZScore(ctx, s.k.due(sh), id)
		done = p.ZScore(ctx, s.k.done(sh), id)
		dead = p.ZScore(ctx, s.k.dead(sh), id)
		st = p.Get(ctx, s.k.stamp(sh))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	v, err := rec.Result()
	if errors.Is(err, redis.Nil) {
		if sm, ok := parseStamp(st.Val()); ok && sm.Count > m.Count {
			return nil, &staleMapError{m: sm}
		}
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	score, serr := due.Result()
	le, _ := lastErr.Result()
	t, err := readRecord(m, sh, id, v, score, serr == nil, done.Err() == nil, le, rcpt.Val())
	if err != nil {
		return t, err
	}
	if died, derr := dead.Result(); derr == nil && t.State == task.StateDead {
		t.DiedAt = task.FromMillis(int64(died)) // the dead set's score: ms of death
	}
	if history {
		setHistory(t, le)
	}
	return t, s.unlessClaimed(ctx, sh, []*task.Task{t})
}

// unlessClaimed makes fired the tasks of ts (read from shard sh) that
// readRecord found delivered but whose generation a worker holds a claim
// of (see is_delivered in common.lua): one HMGET for all of them.
func (s *Store) unlessClaimed(ctx context.Context, sh int, ts []*task.Task) error {
	var fields []string
	var idx []int
	for i, t := range ts {
		if t != nil && t.State == task.StateDelivered {
			fields = append(fields, claimField(t.ID, t.Gen))
			idx = append(idx, i)
		}
	}
	if len(fields) == 0 {
		return nil
	}
	vs, err := s.rdb.HMGet(ctx, s.k.runs(sh), fields...).Result()
	if err != nil {
		return err
	}
	for j, v := range vs {
		if v != nil {
			ts[idx[j]].State = task.StateFired
		}
	}
	return nil
}

// readRecord turns a record read from shard sh into a task as Get answers
// it: the state its due-set presence tells (score, when inDue) and its
// done-set presence (inDone: a lean success or a delivery, see common.lua
// and settle.lua), the last error its attempt history (hist, the err
// hash's value, see history.go) tells, its fire receipt (rcpt, "" for
// none), and a moving record as it will be on its new shard.
func readRecord(m shardmap.Map, sh int, id, v string, score float64, inDue, inDone bool, hist, rcpt string) (*task.Task, error) {
	if v != "" && v[0] == 'M' && len(v) > 8 {
		// on its way to its new shard: as it will be there, where its
		// due-set score is recomputed from the record (not parked)
		inDue, inDone, score = v[1] == 'q', v[1] == 'o', 0
		v = v[8:]
		sh = m.Shard(id)
	}
	t, err := decodeRecord(id, v, sh)
	if err != nil {
		return t, err
	}
	t.LastError = lastError(hist)
	t.Receipt = unpackReceipt(rcpt)
	if t.State == task.StateScheduled || t.State == task.StateRetrying {
		switch {
		case !inDue && inDone:
			// a success recorded in the done set alone (a lean success)
			t.State = task.StateSucceeded
		case !inDue && t.Receipt != nil && t.Receipt.Delivered && t.Receipt.Gen == t.Gen:
			// fired to a topic no work process handles (settle.lua),
			// unless a worker claims it: the caller checks that
			// (Store.unlessClaimed)
			t.State = task.StateDelivered
		case !inDue:
			// A take leaves the record as it is and only drops it from
			// the due set (see common.lua).
			t.State = task.StateFired
		case parkedScore(score, t.DueAt):
			t.State = task.StatePaused
		}
	}
	if t.State == task.StateSucceeded {
		// a success at the first attempt after a redrive writes no
		// history (finish.lua): its death would be the latest entry
		t.LastError = ""
	}
	return t, nil
}

// ShardStats are one shard's figures.
type ShardStats struct {
	Shard     int   `json:"shard"`
	Scheduled int64 `json:"scheduled"` // in the due set: scheduled or retrying, parked ones included
	Firing    int64 `json:"firing"`    // in takes not settled yet (their lease is running)
	Dead      int64 `json:"dead"`
	// EarliestDue is the due time of the due set's head, unless the head is
	// a parked task (nil then, and when the set is empty).
	EarliestDue *time.Time `json:"earliest_due,omitempty"`
	Token       int64      `json:"leader_token"`

	Overdue              int64   `json:"overdue"`                // waiting tasks due before now (parked ones excluded)
	OldestOverdueSeconds float64 `json:"oldest_overdue_seconds"` // now - the earliest due when it is in the past, else 0
	Paused               int64   `json:"paused"`                 // parked tasks on the shard (the sizes of its parked indexes)
}

// Stats reads every shard's figures: Redis' clock, then one pipeline, and
// a second one for the shards that hold parked tasks. "Now" is Redis' clock,
// the one takes go by.
func (s *Store) Stats(ctx context.Context) ([]ShardStats, error) {
	n := s.Map().Count
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	now := task.Millis(tm)
	type cmds struct {
		due, dead, overdue *redis.IntCmd
		head               *redis.ZSliceCmd
		leases, ptypes     *redis.StringSliceCmd
		fence              *redis.StringCmd
	}
	cs := make([]cmds, n)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cs[i] = cmds{
				due:     p.ZCard(ctx, s.k.due(i)),
				leases:  p.ZRange(ctx, s.k.inflight(i), 0, -1),
				dead:    p.ZCard(ctx, s.k.dead(i)),
				head:    p.ZRangeWithScores(ctx, s.k.due(i), 0, 0),
				fence:   p.Get(ctx, s.k.fence(i)),
				overdue: p.ZCount(ctx, s.k.due(i), "-inf", "("+strconv.FormatInt(now, 10)),
				ptypes:  p.SMembers(ctx, s.k.ptypes(i)),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stats: %w", err)
	}
	// shards with parked tasks: their indexes' sizes, and whether the head
	// of the due set is parked (a parked score is far in the future)
	type parked struct {
		cards []*redis.IntCmd
		head  *redis.StringCmd
	}
	ps := make([]parked, n)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cs {
			for _, typ := range c.ptypes.Val() {
				ps[i].cards = append(ps[i].cards, p.ZCard(ctx, s.k.parked(i, typ)))
			}
			if h := c.head.Val(); len(ps[i].cards) > 0 && len(h) == 1 && h[0].Score >= float64(now) {
				id, _ := h[0].Member.(string)
				ps[i].head = p.HGet(ctx, s.k.bucket(i, id), id)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]ShardStats, n)
	for i, c := range cs {
		st := ShardStats{Shard: i, Scheduled: c.due.Val(), Firing: leaseTasks(c.leases.Val()), Dead: c.dead.Val(), Overdue: c.overdue.Val()}
		for _, pc := range ps[i].cards {
			st.Paused += pc.Val()
		}
		if h := c.head.Val(); len(h) == 1 {
			due := int64(h[0].Score)
			headParked := false
			if hc := ps[i].head; hc != nil {
				if t, err := decodeRecord("", hc.Val(), i); t != nil && (err == nil || errors.Is(err, task.ErrCorrupt)) {
					headParked = parkedScore(h[0].Score, t.DueAt)
				}
			}
			if !headParked {
				t := task.FromMillis(due)
				st.EarliestDue = &t
			}
			if due < now {
				st.OldestOverdueSeconds = float64(now-due) / 1000
			}
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
