package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// The coming load (GET /v1/load): how many waiting tasks come due in
// each step of the next horizon. The overall figures are exact: a ZCOUNT
// per step of every shard's due set (censuscount.lua, one call per
// shard). The per-type figures come from a walk of each shard's due set
// in due order up to the horizon's end (censusload.lua), capped like the
// census (CensusCap members per shard): overdue tasks come first, so a
// large backlog uses the cap before the horizon's later steps (Sampled).
// Parked tasks are not counted: their due-set score lies ParkOffset
// (about 35 years) after their due time, past any horizon.

// LoadQuery selects what Load counts.
type LoadQuery struct {
	Horizon time.Duration // how far ahead of now, > 0
	Step    time.Duration // a bucket's width, > 0; the last bucket ends at the horizon
	Type    string        // "": the per-type figures of every type; else only this type's
	Cap     int           // members examined per shard for the per-type figures; <= 0: CensusCap
}

// TypeLoad is one type's figures of a Load.
type TypeLoad struct {
	Counts  []int64 // per bucket
	Overdue int64
}

// Load is the answer of Store.Load.
type Load struct {
	From    time.Time // Redis' clock: the first bucket's start
	Overdue int64     // waiting tasks due before From (exact)
	Buckets []int64   // waiting tasks due in [From + i*Step, From + (i+1)*Step), the last bucket ending at From + Horizon (exact)
	Types   map[string]*TypeLoad
	Sampled bool // a shard's walk stopped at the cap: Types are lower bounds
}

// loadWalk is the per-type walk of one shard's due set.
type loadWalk struct {
	sh    int
	off   int64
	total int64 // the members in range when counted (overdue and buckets)
}

// Load counts the waiting tasks due in each step of the next q.Horizon,
// and those overdue, in total and per type (see the top of this file).
func (s *Store) Load(ctx context.Context, q LoadQuery) (*Load, error) {
	if q.Horizon <= 0 || q.Step <= 0 {
		return nil, fmt.Errorf("load: horizon %v and step %v must be positive", q.Horizon, q.Step)
	}
	capPer := q.Cap
	if capPer <= 0 {
		capPer = CensusCap
	}
	n := s.Map().Count
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	from := task.Millis(tm)
	step, end := q.Step.Milliseconds(), from+q.Horizon.Milliseconds()
	step = max(step, 1)
	nb := int((end - from + step - 1) / step)
	edges := []any{"-inf"}
	for i := range nb + 1 {
		edges = append(edges, strconv.FormatInt(min(from+int64(i)*step, end), 10))
	}
	out := &Load{From: task.FromMillis(from), Buckets: make([]int64, nb), Types: map[string]*TypeLoad{}}
	counts := make([]*shardCall, n)
	for sh := range n {
		counts[sh] = &shardCall{shard: sh, keys: []string{s.k.due(sh)}, args: edges}
	}
	if err := s.execBatched(ctx, censusCountScript, counts); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	var walks []*loadWalk
	for _, c := range counts {
		vs, err := int64s(c.val, nb+1)
		if err != nil {
			return nil, fmt.Errorf("load: shard %d: %w", c.shard, err)
		}
		w := &loadWalk{sh: c.shard}
		out.Overdue += vs[0]
		for i, v := range vs {
			if i > 0 {
				out.Buckets[i-1] += v
			}
			w.total += v
		}
		if w.total > 0 {
			walks = append(walks, w)
		}
	}
	if err := s.loadTypes(ctx, q, walks, from, end, step, capPer, out); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return out, nil
}

// loadTypes walks the shards' due sets (active: those with members in
// range) up to end for the per-type figures, censusChunk members per
// call, at most capPer per shard.
func (s *Store) loadTypes(ctx context.Context, q LoadQuery, active []*loadWalk, from, end, step int64, capPer int, out *Load) error {
	nb := len(out.Buckets)
	for len(active) > 0 {
		calls := make([]*shardCall, len(active))
		for i, w := range active {
			calls[i] = &shardCall{shard: w.sh, keys: []string{s.k.due(w.sh)},
				args: []any{from, w.off, min(censusChunk, int64(capPer)-w.off), end, step}}
		}
		if err := s.execBatched(ctx, censusLoadScript, calls); err != nil {
			return err
		}
		next := active[:0]
		for i, c := range calls {
			w := active[i]
			a, ok := c.val.([]any)
			if !ok || len(a) < 1 || (len(a)-1)%3 != 0 {
				return fmt.Errorf("shard %d: unexpected load reply %v", c.shard, c.val)
			}
			examined, _ := a[0].(int64)
			asked, _ := c.args[2].(int64)
			w.off += examined
			for j := 1; j < len(a); j += 3 {
				typ, _ := a[j].(string)
				b, _ := a[j+1].(int64)
				v, _ := a[j+2].(int64)
				if (q.Type != "" && typ != q.Type) || b < 0 || b > int64(nb) {
					continue
				}
				tl := out.Types[typ]
				if tl == nil {
					tl = &TypeLoad{Counts: make([]int64, nb)}
					out.Types[typ] = tl
				}
				if b == 0 {
					tl.Overdue += v
				} else {
					tl.Counts[b-1] += v
				}
			}
			switch {
			case examined < asked, w.off >= w.total:
			case w.off >= int64(capPer):
				out.Sampled = true
			default:
				next = append(next, w)
			}
		}
		active = next
	}
	return nil
}

// int64s reads a script's reply of n integers.
func int64s(v any, n int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, fmt.Errorf("unexpected count reply %v", v)
	}
	out := make([]int64, n)
	for i, x := range a {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("unexpected count reply %v", v)
		}
	}
	return out, nil
}
