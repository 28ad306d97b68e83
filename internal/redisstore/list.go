package redisstore

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// Listing: List walks one state's tasks with an opaque cursor, doing
// bounded work per call.
//
// The states kept in a sorted set come in one order across every shard of
// the store's map, by the set's score, then id (a k-way merge of the
// shards' sets, see listmerge.go):
//   - scheduled, retrying (and both, State ""): the due set, by due time
//     (the score: due ms + bucket/1024), then id;
//   - paused: the due set's parked part, by due time (the parked score,
//     see park.lua), then id;
//   - dead: the dead set, by the time the task died, oldest first, then id;
//   - succeeded, cancelled: the done set, by the time the record expires
//     (its finish time plus the retention), then id.
//
// The fired and delivered states have no index: they are walked shard by
// shard (0..n-1 of the store's map), in a shard bucket hash by bucket
// hash, and in a bucket by id (per HSCAN page).
//
// A sorted-set walk resumes strictly after the last entry it examined
// (score, id), on every shard, also when that entry has left its set since
// (see listAfterLua): a task that stays in its set during a walk is listed
// exactly once; one added behind the position is listed, one added before
// it is not. A task that a growth of the shard map moves to another shard
// during a walk may be listed twice or not at all; a fired task whose
// bucket hash is rehashed during a walk may be listed twice.

// The limits of List.
const (
	listDefaultLimit = 100
	listMaxLimit     = 1000
	listMinBudget    = 1000 // entries examined per call: max(limit*10, listMinBudget)
	listChunk        = 200  // entries read per round trip (fired: HSCAN count)
	listRecordBatch  = 1000 // records read per round trip (merged walks)
	listBucketBatch  = 32   // bucket hashes scanned per round trip (fired)
	cursorVersion    = 1    // the cursors of the shard-by-shard walks (fired, delivered)
	mergeVersion     = 2    // the cursors of the merged walks (sorted sets); 1 was shard by shard
	maxCursorLen     = 1024
)

// ListQuery selects the tasks List walks.
type ListQuery struct {
	State     task.State // scheduled | retrying | fired | paused | dead | succeeded | cancelled; "" = scheduled and retrying
	Type      string     // "" = any type
	DueAfter  time.Time  // zero = open; inclusive
	DueBefore time.Time  // zero = open; exclusive
	Limit     int        // 1..1000 (the daemon validates; the store clamps: <= 0 is 100)
	Cursor    string     // "" = from the start; else a ListPage.Next of the same query
}

// ListPage is one page of a walk.
type ListPage struct {
	Tasks []Listed // Task with State, LastError, Shard set (as Get answers); DiedAt for dead
	Next  string   // "" = the walk is complete
}

// Listed is one task of a page.
type Listed struct {
	Task   *task.Task
	DiedAt time.Time // dead tasks: when it died
}

// ErrBadCursor is wrapped when a cursor does not parse, was made for another
// state or filter, or names a shard beyond MaxShards.
var ErrBadCursor = errors.New("bad cursor")

// listCursor is a walk's position, encoded as base64url JSON.
type listCursor struct {
	V  int    `json:"v"`            // mergeVersion (sorted sets), cursorVersion (fired, delivered)
	S  string `json:"s"`            // the query's state
	F  uint64 `json:"f"`            // filterHash of the query
	Sh int    `json:"sh"`           // fired, delivered: the shard being walked (sorted sets: 0)
	At bool   `json:"at,omitempty"` // sorted sets: a position is set (else the start)
	// sorted sets: the last entry examined, of any shard; fired: the last
	// id examined in the HSCAN page of cursor C of bucket B
	Sc float64 `json:"sc,omitempty"`
	ID string  `json:"id,omitempty"`
	B  int     `json:"b,omitempty"`
	C  uint64  `json:"c,omitempty"`
}

func (c listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor reads the JSON of an opaque cursor (base64url) into c:
// the syntax every cursor shares (lists, the id search); its caller checks
// what it says.
func parseCursor(s string, c any) error {
	if len(s) > maxCursorLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrBadCursor, maxCursorLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil || d.More() {
		return fmt.Errorf("%w: does not parse", ErrBadCursor)
	}
	return nil
}

// decodeCursor parses a cursor of query q (whose filter hash is f).
func decodeCursor(s string, q ListQuery, f uint64) (listCursor, error) {
	var c listCursor
	if err := parseCursor(s, &c); err != nil {
		return c, err
	}
	if e := checkCursor(c, q, f); e != "" {
		return c, fmt.Errorf("%w: %s", ErrBadCursor, e)
	}
	return c, nil
}

// checkCursor says what is wrong with a parsed cursor c of query q, whose
// filter hash is f ("": nothing). A version 1 cursor of a sorted-set
// state was made by a daemon that listed those shard by shard: its
// position means nothing in the merged order, so it is refused, saying so.
func checkCursor(c listCursor, q ListQuery, f uint64) string {
	want := mergeVersion
	if bucketWalk(q.State) {
		want = cursorVersion
	}
	switch {
	case c.V == cursorVersion && want == mergeVersion:
		return "made by an earlier version, which listed this state shard by shard"
	case c.V != want:
		return fmt.Sprintf("version %d", c.V)
	case c.S != string(q.State):
		return fmt.Sprintf("made for state %q", c.S)
	case c.F != f:
		return "made for another filter"
	case c.Sh < 0 || c.Sh >= shardmap.MaxShards || (want == mergeVersion && c.Sh != 0):
		return fmt.Sprintf("shard %d", c.Sh)
	case c.B < 0 || c.B >= BucketsPerShard:
		return fmt.Sprintf("bucket %d", c.B)
	case len(c.ID) > task.MaxIDLen || math.IsNaN(c.Sc) || math.IsInf(c.Sc, 0):
		return "position"
	case bucketWalk(q.State) && (c.At || c.Sc != 0):
		return "position"
	case !bucketWalk(q.State) && (c.B != 0 || c.C != 0 || !c.At && (c.ID != "" || c.Sc != 0)):
		return "position"
	}
	return ""
}

// filterHash identifies a query's filter (state, type, due range), so that
// a cursor is accepted only by the query that made it.
func filterHash(q ListQuery) uint64 {
	h := fnv.New64a()
	ms := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	fmt.Fprintf(h, "%s\x00%d:%s\x00%s\x00%s", q.State, len(q.Type), q.Type, ms(q.DueAfter), ms(q.DueBefore))
	return h.Sum64()
}

// ceilMillis is t in unix ms rounded up: a due time d (whole ms) is >= t
// exactly when d >= ceilMillis(t), and < t exactly when d < ceilMillis(t).
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// listAfterLua reads the next entries of a sorted set after a position
// (score, member), in the set's order, also when that member has left the
// set or changed its score since (see listafter.lua). Read only.
//
//go:embed listafter.lua
var listAfterLua string

var listAfterScript = redis.NewScript(listAfterLua)

// walk is what List needs to know about the state it lists.
type walk struct {
	set    func(sh int) string // the sorted set walked (nil: fired, the bucket hashes)
	lo, hi float64             // the score range [lo, hi)
	accept func(t *task.Task) bool
	due    bool // the set is the due set (its scores tell parked tasks)
	done   bool // the set is the done set (a waiting-state record in it succeeded)
	dead   bool // the set's score is the time the task died
}

// bucketWalk tells the states listed by walking the bucket hashes (see
// fired): those of tasks in no sorted set.
func bucketWalk(st task.State) bool {
	return st == task.StateFired || st == task.StateDelivered
}

func (s *Store) walkOf(q ListQuery) (walk, error) {
	lo, hi := math.Inf(-1), math.Inf(1)
	if !q.DueAfter.IsZero() {
		lo = float64(ceilMillis(q.DueAfter))
	}
	if !q.DueBefore.IsZero() {
		hi = float64(ceilMillis(q.DueBefore))
	}
	is := func(states ...task.State) func(t *task.Task) bool {
		return func(t *task.Task) bool { return slices.Contains(states, t.State) }
	}
	switch q.State {
	case "":
		return walk{set: s.k.due, lo: lo, hi: hi, accept: is(task.StateScheduled, task.StateRetrying), due: true}, nil
	case task.StateScheduled, task.StateRetrying:
		return walk{set: s.k.due, lo: lo, hi: hi, accept: is(q.State), due: true}, nil
	case task.StatePaused:
		// a parked score is max(due, park time - ParkOffset/2) + ParkOffset
		// (park.lua): at least due + ParkOffset, and below
		// DueBefore + ParkOffset when DueBefore is recent enough
		w := walk{set: s.k.due, lo: ParkOffset, hi: math.Inf(1), accept: is(task.StatePaused), due: true}
		if !q.DueAfter.IsZero() {
			w.lo = lo + ParkOffset
		}
		if !q.DueBefore.IsZero() && time.Until(q.DueBefore) > -ParkOffset/4*time.Millisecond {
			w.hi = hi + ParkOffset
		}
		return w, nil
	case task.StateDead:
		return walk{set: s.k.dead, lo: math.Inf(-1), hi: math.Inf(1), accept: is(task.StateDead), dead: true}, nil
	case task.StateSucceeded, task.StateCancelled:
		return walk{set: s.k.done, lo: math.Inf(-1), hi: math.Inf(1), accept: is(q.State), done: true}, nil
	case task.StateFired, task.StateDelivered:
		// neither is in a sorted set: a delivered task is a fired one
		// whose receipt says so (see is_delivered in common.lua)
		return walk{accept: is(q.State)}, nil
	}
	return walk{}, fmt.Errorf("list: state %q cannot be listed", q.State)
}

// lister is one List call in progress.
type lister struct {
	s      *Store
	q      ListQuery
	w      walk
	m      shardmap.Map
	limit  int
	budget int // entries left to examine
	page   ListPage
}

// keep adds t to the page when it passes the query's filters, and reports
// whether the page is full.
func (l *lister) keep(t *task.Task, diedAt time.Time) bool {
	if t == nil || !l.w.accept(t) || (l.q.Type != "" && t.Type != l.q.Type) ||
		(!l.q.DueAfter.IsZero() && t.DueAt.Before(l.q.DueAfter)) ||
		(!l.q.DueBefore.IsZero() && !t.DueAt.Before(l.q.DueBefore)) {
		return false
	}
	l.page.Tasks = append(l.page.Tasks, Listed{Task: t, DiedAt: diedAt})
	return len(l.page.Tasks) >= l.limit
}

// List walks one state's tasks across shards with an opaque cursor (see
// the comment at the top of this file for the order). It examines at most
// max(limit*10, 1000) entries per call, so a page may hold fewer than
// limit tasks and still have a Next. ErrBadCursor (wrapped) for a cursor
// that does not parse or was made by another query.
func (s *Store) List(ctx context.Context, q ListQuery) (ListPage, error) {
	w, err := s.walkOf(q)
	if err != nil {
		return ListPage{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = listDefaultLimit
	}
	limit = min(limit, listMaxLimit)
	f := filterHash(q)
	c := listCursor{V: mergeVersion, S: string(q.State), F: f}
	if w.set == nil {
		c.V = cursorVersion
	}
	if q.Cursor != "" {
		if c, err = decodeCursor(q.Cursor, q, f); err != nil {
			return ListPage{}, err
		}
	}
	l := &lister{s: s, q: q, w: w, m: s.Map(), limit: limit, budget: max(limit*10, listMinBudget)}
	if w.set != nil {
		return l.merged(ctx, c) // listmerge.go
	}
	return l.byShard(ctx, c)
}

// byShard walks the fired (or delivered) tasks shard by shard from c's
// position.
func (l *lister) byShard(ctx context.Context, c listCursor) (ListPage, error) {
	for c.Sh < l.m.Count {
		done, err := l.fired(ctx, &c)
		if err != nil {
			return ListPage{}, fmt.Errorf("list %s on shard %d: %w", l.q.State, c.Sh, err)
		}
		if !done {
			l.page.Next = c.encode()
			return l.page, nil
		}
		c = listCursor{V: cursorVersion, S: c.S, F: c.F, Sh: c.Sh + 1}
	}
	return l.page, nil
}

// zentry is one sorted-set entry of a listAfter reply.
type zentry struct {
	id    string
	score float64
}

func zsliceOf(v any) ([]zentry, error) {
	a, ok := v.([]any)
	if (!ok && v != nil) || len(a)%2 != 0 {
		return nil, fmt.Errorf("unexpected list reply %v", v)
	}
	out := make([]zentry, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		id, _ := a[i].(string)
		var sc float64
		switch x := a[i+1].(type) {
		case string:
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return nil, fmt.Errorf("unexpected list score %q", x)
			}
			sc = f
		case float64:
			sc = x
		case int64:
			sc = float64(x)
		default:
			return nil, fmt.Errorf("unexpected list score %v", x)
		}
		out = append(out, zentry{id: id, score: sc})
	}
	return out, nil
}

// fired walks shard c.Sh's bucket hashes from c's position (bucket c.B,
// HSCAN cursor c.C, after id c.ID in that page) for records in a fired
// state: a waiting-state record that is not in the due set (see
// common.lua), or f/F.
func (l *lister) fired(ctx context.Context, c *listCursor) (bool, error) {
	sh := c.Sh
	for l.budget > 0 && c.B < BucketsPerShard {
		// a batch of whole buckets from their start, or one page of the
		// bucket the position is in
		nb := 1
		if c.C == 0 && c.ID == "" {
			nb = min(listBucketBatch, BucketsPerShard-c.B, l.budget)
		}
		scans := make([]*redis.ScanCmd, nb)
		_, err := l.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range nb {
				scans[i] = p.HScan(ctx, l.s.k.bucketKey(sh, c.B+i), c.C, "", listChunk)
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
			l.budget -= 1 + len(kv)/2
			full, err := l.firedPage(ctx, c, kv)
			if err != nil || full {
				return false, err
			}
			c.ID = ""
			if next != 0 {
				c.C = next // the rest of the batch is read again later
				break
			}
			c.B, c.C = c.B+1, 0
		}
	}
	return c.B >= BucketsPerShard, nil
}

// firedPage examines one HSCAN page (field, value, ...) in id order, after
// c.ID. It reports whether the page filled up (c.ID is then the last id
// examined).
func (l *lister) firedPage(ctx context.Context, c *listCursor, kv []string) (bool, error) {
	type rec struct{ id, v string }
	var cand []rec
	for i := 0; i+1 < len(kv); i += 2 {
		id, v := kv[i], kv[i+1]
		if id <= c.ID || v == "" {
			continue
		}
		switch v[0] {
		case 's', 'r', 'f', 'F':
			cand = append(cand, rec{id, v})
		}
	}
	if len(cand) == 0 {
		return false, nil
	}
	slices.SortFunc(cand, func(a, b rec) int { return cmp.Compare(a.id, b.id) })
	ids := make([]string, len(cand))
	for i, r := range cand {
		ids[i] = r.id
	}
	scores := make([]*redis.FloatCmd, len(ids))
	var errs, rcpts *redis.SliceCmd
	var done *redis.FloatSliceCmd
	_, err := l.s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			scores[i] = p.ZScore(ctx, l.s.k.due(c.Sh), id)
		}
		// a waiting-state record out of the due set and in the done set
		// succeeded (a lean success, see common.lua) or was delivered
		done = p.ZMScore(ctx, l.s.k.done(c.Sh), ids...)
		errs = p.HMGet(ctx, l.s.k.errs(c.Sh), ids...)
		rcpts = p.HMGet(ctx, l.s.k.receipts(c.Sh), ids...)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	ev, ds, rv := errs.Val(), done.Val(), rcpts.Val()
	ts := make([]*task.Task, len(cand))
	for i, r := range cand {
		var le, rc string
		if i < len(ev) {
			le, _ = ev[i].(string)
		}
		if i < len(rv) {
			rc, _ = rv[i].(string)
		}
		score, serr := scores[i].Result()
		inDone := i < len(ds) && ds[i] != 0
		if t, err := readRecord(l.m, c.Sh, r.id, r.v, score, serr == nil, inDone, le, rc); err == nil {
			ts[i] = t
		}
	}
	if err := l.s.unlessClaimed(ctx, c.Sh, ts); err != nil {
		return false, err
	}
	for i, r := range cand {
		c.ID = r.id
		if ts[i] != nil && l.keep(ts[i], time.Time{}) {
			return true, nil
		}
	}
	return false, nil
}

// CancelMany cancels waiting tasks by id (Cancel, at most BulkWorkers at
// a time); it counts the ones it cancelled. Ids not found or not waiting
// are skipped; a Redis error stops it (the count so far is returned).
func (s *Store) CancelMany(ctx context.Context, ids []string) (int, error) {
	return s.CancelEach(ctx, ids, nil)
}

// CancelEach is CancelMany that calls cancelled (when not nil) with each id
// it cancelled, right after the cancel, on the worker that made it (the
// daemon publishes each one's outcome record).
func (s *Store) CancelEach(ctx context.Context, ids []string, cancelled func(ctx context.Context, id string)) (int, error) {
	return s.bulk(ctx, ids, func(ctx context.Context, id string) error {
		err := s.Cancel(ctx, id)
		if err == nil && cancelled != nil {
			cancelled(ctx, id)
		}
		return err
	})
}

// RedriveMany redrives dead tasks by id (Redrive); see CancelMany.
func (s *Store) RedriveMany(ctx context.Context, ids []string) (int, error) {
	return s.bulk(ctx, ids, func(ctx context.Context, id string) error {
		_, err := s.Redrive(ctx, id)
		return err
	})
}

// DeleteDeadMany deletes dead tasks by id (DeleteDead); see CancelMany.
func (s *Store) DeleteDeadMany(ctx context.Context, ids []string) (int, error) {
	return s.bulk(ctx, ids, func(ctx context.Context, id string) error { return s.DeleteDead(ctx, id) })
}

// BulkWorkers bounds the by-id calls a bulk operation has in flight: a
// bulk of n ids is ceil(n/BulkWorkers) rounds of calls.
const BulkWorkers = 16

// bulk calls op for every id, bulkWorkers at a time, and counts the
// successes; ErrNotFound and a *StateError are not errors.
func (s *Store) bulk(ctx context.Context, ids []string, op func(context.Context, string) error) (int, error) {
	var mu sync.Mutex
	changed := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(BulkWorkers)
	for _, id := range ids {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			err := op(gctx, id)
			var se *StateError
			switch {
			case err == nil:
				mu.Lock()
				changed++
				mu.Unlock()
				return nil
			case errors.Is(err, ErrNotFound), errors.As(err, &se):
				return nil
			}
			return err
		})
	}
	err := g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return changed, err
}
