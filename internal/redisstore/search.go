package redisstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// Search (GET /v1/search): the tasks whose id starts with a prefix, in any
// state, found by scanning every shard's bucket hashes (HSCAN MATCH with
// the prefix, its glob characters escaped: Redis compares the fields and
// sends only those that match) shard by shard (0..n-1 of the store's
// current map), bucket by bucket, with an opaque cursor. One call examines
// about SearchBudget records (the sizes of the buckets it scanned,
// HLEN), so a page may hold fewer tasks than its limit and still have a
// next cursor; the whole scan examines every record of the namespace. A
// page is in id order; the pages are not (each holds the matches of the
// buckets it scanned). A task that stays put is found exactly once; one
// that a growth of the map moves during a scan may be found twice or not
// at all.

// The limits of Search.
const (
	SearchBudget      = 10000 // records examined per call, about (whole buckets)
	searchMaxPrefix   = 200
	searchBucketBatch = 32 // bucket hashes scanned per round trip
	searchCount       = 500
	searchVersion     = 1
)

// SearchQuery selects what Search finds.
type SearchQuery struct {
	Prefix string // 1..200 bytes, matched literally
	Limit  int    // 1..1000 (<= 0: 100)
	Cursor string // "": from the start; else a SearchPage.Next of the same prefix
	Budget int    // records examined per call, about; <= 0: SearchBudget
}

// SearchPage is one page of a search.
type SearchPage struct {
	Tasks   []Listed // in id order; DiedAt set for dead tasks
	Next    string   // "": the scan is complete
	Scanned int64    // records examined by this call
}

// searchCursor is a search's position: shard Sh, bucket B, the HSCAN
// cursor C of that bucket, and the last id taken of that HSCAN page.
type searchCursor struct {
	V  int    `json:"v"`
	P  uint64 `json:"p"` // the prefix's hash
	Sh int    `json:"sh"`
	B  int    `json:"b"`
	C  uint64 `json:"c,omitempty"`
	ID string `json:"id,omitempty"`
}

func prefixHash(p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p))
	return h.Sum64()
}

func (c searchCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeSearchCursor(s, prefix string) (searchCursor, error) {
	var c searchCursor
	if err := parseCursor(s, &c); err != nil { // list.go
		return c, err
	}
	switch {
	case c.V != searchVersion:
		return c, fmt.Errorf("%w: version %d", ErrBadCursor, c.V)
	case c.P != prefixHash(prefix):
		return c, fmt.Errorf("%w: made for another prefix", ErrBadCursor)
	case c.Sh < 0 || c.Sh >= shardmap.MaxShards || c.B < 0 || c.B >= BucketsPerShard || len(c.ID) > task.MaxIDLen:
		return c, fmt.Errorf("%w: position", ErrBadCursor)
	}
	return c, nil
}

// globEscape makes s match itself in a Redis glob pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// searcher is one Search call in progress.
type searcher struct {
	s       *Store
	m       shardmap.Map
	match   string
	prefix  string
	limit   int
	page    SearchPage
	pending []Listed
	budget  int64
	buckets int64 // bucket hashes scanned whole so far (with Scanned: their mean size)
}

// Search finds the tasks whose id starts with q.Prefix (see the top of
// this file). ErrBadCursor (wrapped) for a cursor that does not parse or
// was made for another prefix.
func (s *Store) Search(ctx context.Context, q SearchQuery) (SearchPage, error) {
	if q.Prefix == "" || len(q.Prefix) > searchMaxPrefix {
		return SearchPage{}, fmt.Errorf("search: prefix of %d bytes: must be 1 to %d", len(q.Prefix), searchMaxPrefix)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = listDefaultLimit
	}
	limit = min(limit, listMaxLimit)
	c := searchCursor{V: searchVersion, P: prefixHash(q.Prefix)}
	if q.Cursor != "" {
		var err error
		if c, err = decodeSearchCursor(q.Cursor, q.Prefix); err != nil {
			return SearchPage{}, err
		}
	}
	sr := &searcher{s: s, m: s.Map(), match: globEscape(q.Prefix) + "*", prefix: q.Prefix, limit: limit,
		budget: int64(cmp.Or(max(q.Budget, 0), SearchBudget))}
	for c.Sh < sr.m.Count {
		full, err := sr.shard(ctx, &c)
		if err != nil {
			return SearchPage{}, fmt.Errorf("search on shard %d: %w", c.Sh, err)
		}
		if full || sr.page.Scanned >= sr.budget {
			if c.B >= BucketsPerShard {
				c = searchCursor{V: searchVersion, P: c.P, Sh: c.Sh + 1}
			}
			if c.Sh < sr.m.Count {
				sr.page.Next = c.encode()
			}
			break
		}
		c = searchCursor{V: searchVersion, P: c.P, Sh: c.Sh + 1}
	}
	sr.page.Tasks = sr.pending
	slices.SortFunc(sr.page.Tasks, func(a, b Listed) int { return cmp.Compare(a.Task.ID, b.Task.ID) })
	return sr.page, nil
}

// shard scans shard c.Sh's buckets from c's position until the page is
// full (true: c is where the next call resumes), the budget is spent (c
// likewise) or the shard is done (c.B == BucketsPerShard).
func (sr *searcher) shard(ctx context.Context, c *searchCursor) (bool, error) {
	for c.B < BucketsPerShard && sr.page.Scanned < sr.budget {
		// a batch of whole buckets from their start, or one page of the
		// bucket the position is in
		nb := 1
		if c.C == 0 && c.ID == "" {
			nb = min(searchBucketBatch, BucketsPerShard-c.B)
			if sr.buckets > 0 && sr.page.Scanned > 0 {
				// as many as the budget left holds, by their mean size so far
				mean := max(sr.page.Scanned/sr.buckets, 1)
				nb = int(max(min(int64(nb), (sr.budget-sr.page.Scanned)/mean), 1))
			}
		}
		scans := make([]*redis.ScanCmd, nb)
		lens := make([]*redis.IntCmd, nb)
		_, err := sr.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range nb {
				k := sr.s.k.bucketKey(c.Sh, c.B+i)
				scans[i] = p.HScan(ctx, k, c.C, sr.match, searchCount)
				lens[i] = p.HLen(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		for i := range nb {
			kv, next, err := scans[i].Result()
			if err != nil {
				return false, err
			}
			full, err := sr.take(ctx, c, kv)
			if err != nil || full {
				return full, err
			}
			c.ID = ""
			if next != 0 {
				sr.page.Scanned += searchCount
				c.C = next // the rest of the batch is read again later
				break
			}
			if c.C == 0 {
				sr.page.Scanned += lens[i].Val()
				sr.buckets++
			} else {
				sr.page.Scanned += searchCount
			}
			c.B, c.C = c.B+1, 0
		}
	}
	return false, nil
}

// take reads the tasks of one HSCAN page's matches (field, value, ...) in
// id order, after c.ID, into the page; it reports whether the page filled
// up (c.ID is then the last id taken).
func (sr *searcher) take(ctx context.Context, c *searchCursor, kv []string) (bool, error) {
	type rec struct{ id, v string }
	var cand []rec
	for i := 0; i+1 < len(kv); i += 2 {
		if id := kv[i]; id > c.ID && strings.HasPrefix(id, sr.prefix) {
			cand = append(cand, rec{id, kv[i+1]})
		}
	}
	if len(cand) == 0 {
		return false, nil
	}
	slices.SortFunc(cand, func(a, b rec) int { return cmp.Compare(a.id, b.id) })
	if room := sr.limit - len(sr.pending); len(cand) > room {
		cand = cand[:room]
	}
	ids := make([]string, len(cand))
	for i, r := range cand {
		ids[i] = r.id
	}
	sh := c.Sh
	var errs, rcpts *redis.SliceCmd
	var due, done, dead *redis.FloatSliceCmd
	_, err := sr.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		due = p.ZMScore(ctx, sr.s.k.due(sh), ids...)
		done = p.ZMScore(ctx, sr.s.k.done(sh), ids...)
		dead = p.ZMScore(ctx, sr.s.k.dead(sh), ids...)
		errs = p.HMGet(ctx, sr.s.k.errs(sh), ids...)
		rcpts = p.HMGet(ctx, sr.s.k.receipts(sh), ids...)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	// ZMSCORE answers 0 for a member that is absent (go-redis reads nil as
	// 0); no score of these sets is 0
	dues, dones, deads := due.Val(), done.Val(), dead.Val()
	ev, rv := errs.Val(), rcpts.Val()
	ts := make([]*task.Task, len(cand))
	var died []time.Time
	for i, r := range cand {
		le, _ := at(ev, i).(string)
		rc, _ := at(rv, i).(string)
		score := fat(dues, i)
		t, err := readRecord(sr.m, sh, r.id, r.v, score, score != 0, fat(dones, i) != 0, le, rc)
		if err != nil {
			continue // unreadable: Get tells more
		}
		ts[i] = t
		if d := fat(deads, i); d != 0 && t.State == task.StateDead {
			died = append(died, task.FromMillis(int64(d)))
		} else {
			died = append(died, time.Time{})
		}
	}
	if err := sr.s.unlessClaimed(ctx, sh, ts); err != nil {
		return false, err
	}
	j := 0
	for i, r := range cand {
		c.ID = r.id
		if ts[i] != nil {
			sr.pending = append(sr.pending, Listed{Task: ts[i], DiedAt: died[j]})
			j++
		}
	}
	return len(sr.pending) >= sr.limit, nil
}

// fat is vs[i], or 0 past its end.
func fat(vs []float64, i int) float64 {
	if i < len(vs) {
		return vs[i]
	}
	return 0
}
