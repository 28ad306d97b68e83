package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

// Parking: a worker defers the fired tasks of a paused type without using
// an attempt, and they run when the type is resumed, in their order.
//
// A parked task stays in its shard's due set, with score its record's due
// time + ParkOffset (park.lua), so that no take fires it while cancel,
// reschedule and a shard move keep working unchanged on it (a move
// recomputes the score from the record: the task arrives unparked, and its
// worker parks it again if the type is still paused). Its generation goes
// up, like a deferral's, so its Kafka copy is stale. A per-shard, per-type
// index (keys.parked: id -> due time) and a per-shard set of the types
// with a non-empty index (keys.ptypes) make a resume cost the parked tasks
// of that type: Unpark walks the index and puts each task still parked
// back at its due time. A cancel, a reschedule or an update of a parked
// task takes it out of the index in the same script (unindex_parked in
// common.lua), so the index sizes count parked tasks; an entry whose task
// left some other way (a shard move) is dropped by the next Unpark.

// ParkOffset is added, in milliseconds, to a parked task's due-set score:
// 2^40 ms, about 35 years, so that a take never reaches it. A task is
// parked when its score is at least its record's due time + ParkOffset.
const ParkOffset = 1 << 40

// unparkPage is the most index entries one unpark script call handles.
const unparkPage = 500

//go:embed park.lua
var parkLua string

//go:embed unpark.lua
var unparkLua string

var (
	parkScript   = script(parkLua)
	unparkScript = script(unparkLua)
)

// parkedScore tells whether a due-set score is a parked one for a record
// due at due.
func parkedScore(score float64, due time.Time) bool {
	return math.Floor(score) >= float64(task.Millis(due)+ParkOffset)
}

// Park is one fired task a worker defers because its type is paused.
type Park struct {
	ID    string
	Gen   uint64 // the fired copy's generation: a record of another one is left alone
	Type  string // the task's type: the index it is parked in
	Owner string // the execution claim's owner ('' none): the claim is deleted if it holds it
	Shard int    // the shard it was fired from (dq-shard)
}

// ParkMany parks fired tasks of paused types (park.lua): each whose record
// is still in a fired state with generation Gen goes back to its shard's
// due set out of reach of takes, with the next generation, and into its
// type's parked index; the others (finished, changed, parked already) are
// skipped. Tasks are grouped by shard and the shards packed into script
// calls (packCalls).
// It returns how many it parked, and the first error (Redis: the tasks of
// that call may or may not be parked; parking again is harmless).
func (s *Store) ParkMany(ctx context.Context, ps []Park) (int, error) {
	secs := chunks(indexes(len(ps)), func(i int) int { return s.firedShard(ps[i].ID, ps[i].Shard, true) })
	calls := s.packShards(secs, []any{int64(ParkOffset)}, func(sec *chunk[int], c *shardCall) {
		sh := sec.key
		c.keys = append(c.keys, s.k.due(sh), s.k.ptypes(sh), s.k.runs(sh), s.k.done(sh))
		c.args = append(c.args, len(sec.idx))
		for _, i := range sec.idx {
			p := ps[i]
			c.keys = append(c.keys, s.k.bucket(sh, p.ID), s.k.parked(sh, p.Type))
			c.args = append(c.args, p.ID, p.Gen, p.Type, p.Owner)
		}
	})
	s.execCalls(ctx, parkScript, calls)
	parked := 0
	var firstErr error
	for _, c := range calls {
		err := c.err
		a, ok := c.val.([]any)
		if err == nil && (!ok || len(a) != len(c.idx)) {
			err = fmt.Errorf("unexpected park reply %v", c.val)
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("park on %s: %w", c.where(), err)
			}
			continue
		}
		for _, v := range a {
			if code, _ := v.(int64); code == 1 {
				parked++
			}
		}
	}
	return parked, firstErr
}

// Unpark puts the parked tasks of typ back at their original due time (so
// they keep their order and are due now), in pages of at most unparkPage
// per script call, across every shard. It returns how many it moved. Safe
// to repeat (a second call finds nothing) and to race with parks and with
// another Unpark.
func (s *Store) Unpark(ctx context.Context, typ string) (int, error) {
	n := s.Map().Count
	cards := make([]*redis.IntCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cards[i] = p.ZCard(ctx, s.k.parked(i, typ))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("unpark %s: %w", typ, err)
	}
	moved := 0
	for sh, c := range cards {
		if c.Val() == 0 {
			continue
		}
		m, err := s.unparkShard(ctx, sh, typ, c.Val())
		moved += m
		if err != nil {
			return moved, fmt.Errorf("unpark %s on shard %d: %w", typ, sh, err)
		}
	}
	return moved, nil
}

// unparkShard empties one shard's index of typ, page by page. It stops
// after the pages that the entries it found at the start need (and a few
// more): entries that keep coming (a type paused again meanwhile) are left
// to the next call.
func (s *Store) unparkShard(ctx context.Context, sh int, typ string, count int64) (int, error) {
	moved := 0
	pages := count/unparkPage + 4
	for range pages {
		ids, err := s.rdb.ZRange(ctx, s.k.parked(sh, typ), 0, unparkPage-1).Result()
		if err != nil {
			return moved, err
		}
		if len(ids) == 0 {
			return moved, nil
		}
		keys := make([]string, 0, 3+len(ids))
		keys = append(keys, s.k.due(sh), s.k.parked(sh, typ), s.k.ptypes(sh))
		args := make([]any, 0, 4+len(ids))
		args = append(args, int64(ParkOffset), typ, s.k.wake, sh)
		for _, id := range ids {
			keys = append(keys, s.k.bucket(sh, id))
			args = append(args, id)
		}
		v, err := s.run(ctx, unparkScript, keys, args...)
		if err != nil {
			return moved, err
		}
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return moved, fmt.Errorf("unexpected unpark reply %v", v)
		}
		m, _ := a[0].(int64)
		left, _ := a[1].(int64)
		moved += int(m)
		if left == 0 {
			return moved, nil
		}
	}
	return moved, nil
}

// ParkedTypes is the parked task count per type, summed over shards (the
// sizes of the parked indexes; a parked task moved to another shard by a
// growth is counted until an Unpark of its type drops its entry).
func (s *Store) ParkedTypes(ctx context.Context) (map[string]int64, error) {
	n := s.Map().Count
	idx, err := s.parkedIndexes(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("parked types: %w", err)
	}
	out := make(map[string]int64)
	for _, shard := range idx {
		for typ, c := range shard {
			if c > 0 {
				out[typ] += c
			}
		}
	}
	return out, nil
}

// parkedIndexes reads the size of every parked index of shards 0..n-1 (two
// pipelines: the types, then their sizes).
func (s *Store) parkedIndexes(ctx context.Context, n int) ([]map[string]int64, error) {
	types := make([]*redis.StringSliceCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			types[i] = p.SMembers(ctx, s.k.ptypes(i))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]map[string]int64, n)
	cards := make([]map[string]*redis.IntCmd, n)
	found := false
	for i, c := range types {
		if len(c.Val()) > 0 {
			cards[i] = make(map[string]*redis.IntCmd, len(c.Val()))
			found = true
		}
	}
	if !found {
		return out, nil
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range types {
			for _, typ := range c.Val() {
				cards[i][typ] = p.ZCard(ctx, s.k.parked(i, typ))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, m := range cards {
		if m == nil {
			continue
		}
		out[i] = make(map[string]int64, len(m))
		for typ, c := range m {
			out[i][typ] = c.Val()
		}
	}
	return out, nil
}
