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

// The census: how many tasks of each type wait, are paused, succeeded or
// died (Census, GET /v1/counts), how many come due in the next hours
// (Load, censusload.go) and how many finished in the last ones (History,
// censushistory.go).
//
// Nothing counts tasks by type as they change state: a counter per type
// would cost every schedule, take and finish a write, and would drift
// from the sets whenever a script's write and its counter's disagree (a
// crash between them, a shard move, a purge). The census reads the sets
// instead, when asked: a walk of each shard's due, done and dead sets in
// chunks of censusChunk members by rank (census.lua: one short read-only
// script per chunk that returns only (type, count) pairs, never a record),
// and the parked indexes' sizes for the paused tasks (exact). The walk of
// one set of one shard stops after a cap of members (CensusCap unless the
// caller lowers it): the per-type figures of a census that hit a cap are
// lower bounds of the counts of the members scanned (Sampled), not scaled
// up.
//
// The census reads the shards of the store's current map. While the map
// grows, a task on its way to its new shard may be counted on both or on
// neither; a shard the map does not name yet is not read.

// CensusCap is the most members the census examines per sorted set and
// shard (the due, done and dead set of each shard): 20,000 members of a
// set are 40 script calls of about 2 ms of Redis each (4 µs a member,
// records of 250 bytes, measured on the 2-vCPU test VM), per set and
// shard. A census that stops at the cap says so (Census.Sampled).
const CensusCap = 20000

// The census' work per call: censusChunk members per script call (about
// 2 ms of Redis: other clients wait while a script runs), censusBatch
// calls per round trip.
const (
	censusChunk = 500
	censusBatch = 64
)

//go:embed census.lua
var censusLua string

//go:embed censusload.lua
var censusLoadLua string

//go:embed censuscount.lua
var censusCountLua string

var (
	censusScript      = script(censusLua)
	censusLoadScript  = script(censusLoadLua)
	censusCountScript = script(censusCountLua)
)

// TypeCounts are the census' figures of one task type, or their totals.
type TypeCounts struct {
	Scheduled int64 // waiting in a due set at attempt 1 (state scheduled), not parked
	Retrying  int64 // waiting in a due set after a failed attempt (state retrying), not parked
	Paused    int64 // parked (in a parked index)
	Succeeded int64 // in a done set (within the retention): state succeeded, lean successes included
	Dead      int64 // in a dead set
}

func (c *TypeCounts) add(o TypeCounts) {
	c.Scheduled += o.Scheduled
	c.Retrying += o.Retrying
	c.Paused += o.Paused
	c.Succeeded += o.Succeeded
	c.Dead += o.Dead
}

// Census is the answer of Store.Census.
type Census struct {
	At    time.Time             // Redis' clock when the census began
	Types map[string]TypeCounts // per task type
	// Totals are exact (the sums of Types) while Sampled is false. When
	// it is true, Dead (the dead sets' sizes) and Paused stay exact, and
	// the members of a set left unscanned are split between scheduled and
	// retrying (due sets: its size less its parked tasks) or counted as
	// succeeded (done sets) in the proportions of the members scanned: an
	// estimate.
	Totals  TypeCounts
	Sampled bool  // a set of a shard held more members than the cap: Types are lower bounds
	Scanned int64 // the sorted-set members examined
}

// censusSet is the walk of one sorted set of one shard.
type censusSet struct {
	sh      int
	kind    string // q due, o done, x dead
	key     string
	card    int64 // its size when the census began
	rank    int64 // the next chunk's first rank
	done    bool
	counted TypeCounts // what its records counted (all types)
}

// Census counts every shard's tasks by type and state (see the top of
// this file), examining at most capPerSet members of each sorted set of
// each shard (capPerSet <= 0: CensusCap).
func (s *Store) Census(ctx context.Context, capPerSet int) (*Census, error) {
	if capPerSet <= 0 {
		capPerSet = CensusCap
	}
	n := s.Map().Count
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	out := &Census{At: task.FromMillis(task.Millis(tm)), Types: map[string]TypeCounts{}}
	sets, paused, err := s.censusSizes(ctx, n, out)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	for active := sets; len(active) > 0; {
		if err := s.censusRound(ctx, active, int64(capPerSet), out); err != nil {
			return nil, fmt.Errorf("census: %w", err)
		}
		next := active[:0]
		for _, cs := range active {
			switch {
			case cs.done:
			case cs.rank >= int64(capPerSet):
				out.Sampled = true
			default:
				next = append(next, cs)
			}
		}
		active = next
	}
	out.Totals.Paused = 0
	for _, p := range paused {
		out.Totals.Paused += p
	}
	for _, cs := range sets {
		out.Totals.add(cs.estimate(paused[cs.sh]))
	}
	return out, nil
}

// estimate is what the set holds (see Census.Totals): what its records
// counted, and when the walk stopped at the cap, the rest in the same
// proportions.
func (cs *censusSet) estimate(paused int64) TypeCounts {
	c := cs.counted
	if cs.kind == "x" {
		return TypeCounts{Dead: cs.card}
	}
	if cs.done || cs.rank == 0 {
		return c
	}
	rest := cs.card - cs.rank
	if cs.kind == "q" {
		rest -= paused
		if seen := c.Scheduled + c.Retrying; rest > 0 && seen > 0 {
			r := rest * c.Retrying / seen
			c.Retrying += r
			c.Scheduled += rest - r
		}
		return c
	}
	if rest > 0 {
		c.Succeeded += rest * c.Succeeded / cs.rank
	}
	return c
}

// censusSizes reads the sizes of every shard's due, done and dead sets and
// the parked tasks per type (into out.Types), and returns the walks of the
// sets that are not empty and the parked tasks per shard.
func (s *Store) censusSizes(ctx context.Context, n int, out *Census) ([]*censusSet, []int64, error) {
	type cmds struct {
		due, done, dead *redis.IntCmd
		ptypes          *redis.StringSliceCmd
	}
	cs := make([]cmds, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh := range n {
			cs[sh] = cmds{due: p.ZCard(ctx, s.k.due(sh)), done: p.ZCard(ctx, s.k.done(sh)),
				dead: p.ZCard(ctx, s.k.dead(sh)), ptypes: p.SMembers(ctx, s.k.ptypes(sh))}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	type parked struct {
		sh  int
		typ string
		n   *redis.IntCmd
	}
	var ps []parked
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh, c := range cs {
			for _, typ := range c.ptypes.Val() {
				ps = append(ps, parked{sh: sh, typ: typ, n: p.ZCard(ctx, s.k.parked(sh, typ))})
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	perShard := make([]int64, n)
	for _, p := range ps {
		if v := p.n.Val(); v > 0 {
			perShard[p.sh] += v
			tc := out.Types[p.typ]
			tc.Paused += v
			out.Types[p.typ] = tc
		}
	}
	var sets []*censusSet
	for sh, c := range cs {
		for _, set := range []struct {
			kind, key string
			card      int64
		}{{"q", s.k.due(sh), c.due.Val()}, {"o", s.k.done(sh), c.done.Val()}, {"x", s.k.dead(sh), c.dead.Val()}} {
			if set.card > 0 {
				sets = append(sets, &censusSet{sh: sh, kind: set.kind, key: set.key, card: set.card})
			}
		}
	}
	return sets, perShard, nil
}

// censusRound reads the next chunk of every active walk (up to the cap),
// censusBatch script calls per round trip, and adds what they counted to
// out.
func (s *Store) censusRound(ctx context.Context, active []*censusSet, capPerSet int64, out *Census) error {
	calls := make([]*shardCall, len(active))
	for i, cs := range active {
		calls[i] = &shardCall{shard: cs.sh, keys: []string{cs.key, s.k.due(cs.sh)},
			args: []any{cs.kind, cs.rank, min(censusChunk, capPerSet-cs.rank), int64(ParkOffset)}}
	}
	if err := s.execBatched(ctx, censusScript, calls); err != nil {
		return err
	}
	for i, c := range calls {
		cs := active[i]
		a, ok := c.val.([]any)
		if !ok || len(a) < 1 || (len(a)-1)%3 != 0 {
			return fmt.Errorf("shard %d: unexpected census reply %v", c.shard, c.val)
		}
		examined, _ := a[0].(int64)
		out.Scanned += examined
		cs.rank += examined
		asked, _ := c.args[2].(int64)
		cs.done = examined < asked || cs.rank >= cs.card
		for j := 1; j < len(a); j += 3 {
			typ, _ := a[j].(string)
			x, _ := a[j+1].(int64)
			y, _ := a[j+2].(int64)
			var d TypeCounts
			switch cs.kind {
			case "q":
				d = TypeCounts{Scheduled: x, Retrying: y}
			case "o":
				d = TypeCounts{Succeeded: x}
			default:
				d = TypeCounts{Dead: x}
			}
			cs.counted.add(d)
			tc := out.Types[typ]
			tc.add(d)
			out.Types[typ] = tc
		}
	}
	return nil
}

// execBatched sends calls censusBatch at a time (execCalls: one pipeline
// each, side by side on a Redis Cluster) and returns the first call's
// error, naming its shard.
func (s *Store) execBatched(ctx context.Context, sc *redis.Script, calls []*shardCall) error {
	for i := 0; i < len(calls); i += censusBatch {
		b := calls[i:min(i+censusBatch, len(calls))]
		s.execCalls(ctx, sc, b)
		for _, c := range b {
			if c.err != nil {
				return fmt.Errorf("shard %d: %w", c.shard, c.err)
			}
		}
	}
	return ctx.Err()
}
