package redisstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

// The k-way merge behind List for the states kept in sorted sets (the due,
// dead and done sets): one order across every shard, by (score, id).
//
// Every shard's set is read after the walk's position (listafter.lua) in
// windows; an entry is taken only when every shard that may hold a
// smaller one has been read past it, so the entries come out in the
// global order however the tasks spread over the shards. The first read
// asks each shard for about 1.5 times its share of the page
// (firstWindow); a shard whose window runs dry while the page still needs
// entries is read again, with twice its last window (at most what the
// merge still needs), all such shards in one round trip.
//
// Per page, with n the shard count and limit the page size: one round
// trip of n listafter calls (one pipeline; on a Redis Cluster, n calls
// side by side), rarely a second or third one for the shards that ran dry,
// then one pipeline of HGETs (and per shard an HMGET of last errors and
// one of receipts) for the entries examined: one for a page whose entries
// all pass the filters, a few more (doubling) when the filters drop some. The entries read are at
// most n*firstWindow (about 1.5*limit + 3n) plus three times those
// examined (at most max(10*limit, 1000), see List).

// mentry is an entry of a merge: a sorted-set entry and its shard.
type mentry struct {
	zentry
	sh int
}

// before tells the merge's order: by score, then id bytewise (the order
// of a sorted set, and of listafter.lua).
func (z zentry) before(o zentry) bool {
	if z.score != o.score {
		return z.score < o.score
	}
	return z.id < o.id
}

// mergeShard is one shard's side of a merge.
type mergeShard struct {
	sh     int
	sc     float64  // the position its next read resumes after: score,
	id     string   // and id ("": before every id of that score)
	buf    []zentry // read, not taken yet
	window int      // the count its last read asked for (0: none yet)
	end    bool     // the set holds nothing in range after buf
}

// mergeHeap holds the shards with entries read and not taken, by their
// next entry.
type mergeHeap []*mergeShard

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return h[i].buf[0].before(h[j].buf[0]) }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(*mergeShard)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// merge is one List call's merge of a sorted set over the shards.
type merge struct {
	s       *Store
	set     func(sh int) string
	hi      float64 // scores at or past hi are out of range
	first   int     // the window of a shard's first read
	ready   mergeHeap
	starved []*mergeShard // read dry but may hold more: read before the next take
}

// firstWindow is the count a merge's first read asks each of n shards for,
// for a page of limit: about 1.5 times a shard's share, so that a page of
// tasks spread evenly rarely needs a second read.
func firstWindow(limit, n int) int {
	return min(limit, (3*limit+2*n-1)/(2*n)+2)
}

// newMerge starts a merge of w's set over shards shards, after c's
// position (its start when c has none), for a page of limit.
func newMerge(s *Store, w walk, shards, limit int, c listCursor) *merge {
	m := &merge{s: s, set: w.set, hi: w.hi, first: firstWindow(limit, shards)}
	for sh := range shards {
		ms := &mergeShard{sh: sh, sc: w.lo}
		if c.At {
			ms.sc, ms.id = c.Sc, c.ID
		}
		m.starved = append(m.starved, ms)
	}
	return m
}

// over reports whether every entry in range was taken.
func (m *merge) over() bool { return len(m.starved) == 0 && m.ready.Len() == 0 }

// next takes up to n entries, the next ones in the merge's order; fewer
// only when the merge is over.
func (m *merge) next(ctx context.Context, n int) ([]mentry, error) {
	out := make([]mentry, 0, n)
	for len(out) < n {
		if len(m.starved) > 0 {
			if err := m.read(ctx, n-len(out)); err != nil {
				return nil, err
			}
		}
		if m.ready.Len() == 0 {
			break
		}
		ms := m.ready[0]
		out = append(out, mentry{zentry: ms.buf[0], sh: ms.sh})
		ms.buf = ms.buf[1:]
		if len(ms.buf) > 0 {
			heap.Fix(&m.ready, 0)
			continue
		}
		heap.Pop(&m.ready)
		if !ms.end {
			m.starved = append(m.starved, ms)
		}
	}
	return out, nil
}

// read reads the starved shards' next windows in one round trip: a
// shard's first read asks for m.first entries, a later one for twice its
// last window, but no more than want (what the merge still needs, at
// least m.first).
func (m *merge) read(ctx context.Context, want int) error {
	calls := make([]*shardCall, len(m.starved))
	for i, ms := range m.starved {
		w := m.first
		if ms.window > 0 {
			w = min(2*ms.window, max(want, m.first))
		}
		ms.window = w
		calls[i] = &shardCall{shard: ms.sh, keys: []string{m.set(ms.sh)}, args: []any{scoreArg(ms.sc), ms.id, w}}
	}
	m.s.execCalls(ctx, listAfterScript, calls)
	for i, c := range calls {
		if c.err != nil {
			return fmt.Errorf("shard %d: %w", c.shard, c.err)
		}
		zs, err := zsliceOf(c.val)
		if err != nil {
			return fmt.Errorf("shard %d: %w", c.shard, err)
		}
		ms := m.starved[i]
		ms.end = len(zs) < ms.window
		for j, z := range zs {
			if z.score >= m.hi {
				zs, ms.end = zs[:j], true
				break
			}
		}
		if len(zs) > 0 {
			ms.buf = zs
			ms.sc, ms.id = zs[len(zs)-1].score, zs[len(zs)-1].id
			heap.Push(&m.ready, ms)
		}
	}
	m.starved = m.starved[:0]
	return nil
}

// scoreArg is a score as listafter.lua's position takes it.
func scoreArg(f float64) string {
	switch {
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsInf(f, 1):
		return "+inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// merged walks a sorted-set state across every shard in (score, id)
// order from c's position, until the page is full or the budget is spent
// (Next names the last entry examined) or the sets are done (no Next).
func (l *lister) merged(ctx context.Context, c listCursor) (ListPage, error) {
	m := newMerge(l.s, l.w, l.m.Count, l.limit, c)
	chunk := min(l.limit, listRecordBatch)
	for l.budget > 0 {
		ents, err := m.next(ctx, min(chunk, l.budget))
		if err != nil {
			return ListPage{}, fmt.Errorf("list %s: %w", l.q.State, err)
		}
		ts, err := l.records(ctx, ents)
		if err != nil {
			return ListPage{}, fmt.Errorf("list %s: %w", l.q.State, err)
		}
		for i, e := range ents {
			l.budget--
			c.At, c.Sc, c.ID = true, e.score, e.id
			var died time.Time
			if l.w.dead {
				died = task.FromMillis(int64(e.score))
			}
			if ts[i] != nil && l.keep(ts[i], died) {
				if i < len(ents)-1 || !m.over() {
					l.page.Next = c.encode()
				}
				return l.page, nil
			}
		}
		if m.over() {
			return l.page, nil
		}
		chunk = min(max(2*chunk, l.limit-len(l.page.Tasks)), listRecordBatch)
	}
	l.page.Next = c.encode()
	return l.page, nil
}

// records reads the records of ents (of any shards), with their last
// errors and receipts, in one pipeline; an entry whose record is gone or
// unreadable (Get tells more) is nil.
func (l *lister) records(ctx context.Context, ents []mentry) ([]*task.Task, error) {
	if len(ents) == 0 {
		return nil, nil
	}
	recs := make([]*redis.StringCmd, len(ents))
	ids := map[int][]string{} // shard -> its ids, in ents' order
	for _, e := range ents {
		ids[e.sh] = append(ids[e.sh], e.id)
	}
	errs, rcpts := map[int]*redis.SliceCmd{}, map[int]*redis.SliceCmd{}
	_, err := l.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range ents {
			recs[i] = p.HGet(ctx, l.s.k.bucket(e.sh, e.id), e.id)
		}
		for sh, shIDs := range ids {
			errs[sh] = p.HMGet(ctx, l.s.k.errs(sh), shIDs...)
			rcpts[sh] = p.HMGet(ctx, l.s.k.receipts(sh), shIDs...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	ts := make([]*task.Task, len(ents))
	seen := map[int]int{} // shard -> entries of it so far
	for i, e := range ents {
		k := seen[e.sh]
		seen[e.sh]++
		v, err := recs[i].Result()
		if err != nil {
			continue // gone meanwhile
		}
		le, _ := at(errs[e.sh].Val(), k).(string)
		rc, _ := at(rcpts[e.sh].Val(), k).(string)
		if t, err := readRecord(l.m, e.sh, e.id, v, e.score, l.w.due, l.w.done, le, rc); err == nil {
			ts[i] = t
		}
	}
	return ts, nil
}

// at is vs[i], or nil past its end.
func at(vs []any, i int) any {
	if i < len(vs) {
		return vs[i]
	}
	return nil
}
