package redisstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The census (counts per type, load, history) and the id-prefix search,
// on a standalone redis-server and on a 3-master Redis Cluster.

func TestCensusStandalone(t *testing.T) {
	censusSuite(t, testenv.StartRedis(t).Client(t), true)
}

func TestCensusCluster(t *testing.T) {
	censusSuite(t, testenv.StartRedisCluster(t).Client(t), false)
}

func censusSuite(t *testing.T, rdb redis.UniversalClient, parallel bool) {
	for name, f := range map[string]func(*testing.T, redis.UniversalClient){
		"Counts":  testCensusCounts,
		"Sampled": testCensusSampled,
		"Load":    testCensusLoad,
		"History": testCensusHistory,
		"Search":  testSearch,
	} {
		t.Run(name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			f(t, rdb)
		})
	}
}

func mustCensus(t *testing.T, s *Store, capPerSet int) *Census {
	t.Helper()
	c, err := s.Census(t.Context(), capPerSet)
	if err != nil {
		t.Fatalf("census: %v", err)
	}
	return c
}

// testCensusCounts: one task of each state of type order.cancel (fired
// and cancelled ones are in no figure), 40 scheduled tasks of mail.send,
// and a lean success: the counts are exact.
func testCensusCounts(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	statesFixture(t, s)
	now := redisNow(t, s)
	var tasks []*task.Task
	for i := range 40 {
		tk := mk(fmt.Sprintf("mail-%d", i), now.Add(time.Hour))
		tk.Type = "mail.send"
		tasks = append(tasks, tk)
	}
	lean := mk("lean-1", now.Add(-time.Second))
	lean.Type = "lean.type"
	tasks = append(tasks, lean)
	scheduleAll(t, s, tasks)
	var gen uint64
	for _, f := range takeAll(t, s, 2) {
		if f.ID == "lean-1" {
			gen = f.Gen
		}
	}
	if r, err := s.ClaimMany(t.Context(), []Claim{{ID: "lean-1", Gen: gen, Owner: "w1", Shard: s.Shard("lean-1"), TTL: time.Minute}}); err != nil || r[0].Code != Claimed {
		t.Fatalf("claim: %+v %v", r, err)
	}
	mustFinish(t, s, Finish{ID: "lean-1", Gen: gen, Owner: "w1", Kind: Succeeded})
	if g, err := s.Get(t.Context(), "lean-1"); err != nil || g.State != task.StateSucceeded {
		t.Fatalf("lean success: %+v %v", g, err)
	}
	c := mustCensus(t, s, 0)
	want := map[string]TypeCounts{
		"order.cancel": {Scheduled: 1, Retrying: 1, Paused: 1, Succeeded: 1, Dead: 1},
		"mail.send":    {Scheduled: 40},
		"lean.type":    {Succeeded: 1},
	}
	if !mapsEqual(c.Types, want) {
		t.Fatalf("types %+v, want %+v", c.Types, want)
	}
	if c.Sampled || c.Totals != (TypeCounts{Scheduled: 41, Retrying: 1, Paused: 1, Succeeded: 2, Dead: 1}) {
		t.Fatalf("totals %+v sampled %v", c.Totals, c.Sampled)
	}
	// scanned: the due set (42 waiting, 1 parked), the done set (the
	// success, the lean one, the cancelled one), the dead set
	if c.Scanned != 43+3+1 || c.At.IsZero() {
		t.Fatalf("scanned %d at %v", c.Scanned, c.At)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// testCensusSampled: more members than the cap per set: sampled, per-type
// figures are lower bounds, the totals of the dead and paused exact and
// the waiting total exact (split by the scanned proportion).
func testCensusSampled(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	now := redisNow(t, s)
	var tasks []*task.Task
	for i := range 300 {
		tk := mk(fmt.Sprintf("smp-%d", i), now.Add(time.Hour+time.Duration(i)*time.Second))
		if i%3 == 0 {
			tk.Type = "mail.send"
		}
		tasks = append(tasks, tk)
	}
	scheduleAll(t, s, tasks)
	const capPerSet = 20
	c := mustCensus(t, s, capPerSet)
	if !c.Sampled {
		t.Fatal("not sampled")
	}
	var seen int64
	for typ, tc := range c.Types {
		if tc.Retrying != 0 || tc.Dead != 0 || tc.Succeeded != 0 {
			t.Fatalf("%s: %+v", typ, tc)
		}
		seen += tc.Scheduled
	}
	if seen != 2*capPerSet || c.Scanned != 2*capPerSet {
		t.Fatalf("counted %d, scanned %d: want %d (the cap of each shard's due set)", seen, c.Scanned, 2*capPerSet)
	}
	if c.Totals.Scheduled != 300 || c.Totals.Retrying != 0 {
		t.Fatalf("totals %+v", c.Totals)
	}
	// below the cap again: exact
	if c := mustCensus(t, s, 1000); c.Sampled || c.Types["mail.send"].Scheduled != 100 || c.Types["order.cancel"].Scheduled != 200 {
		t.Fatalf("uncapped: %+v", c)
	}
}

// testCensusLoad: tasks at known due times land in their buckets; parked
// and later tasks are not counted; overdue ones are.
func testCensusLoad(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	statesFixture(t, s) // order.cancel: st-s due in an hour, st-r retrying in an hour, st-p parked
	now := redisNow(t, s)
	var tasks []*task.Task
	add := func(typ string, n int, d time.Duration) {
		for range n {
			tk := mk(fmt.Sprintf("ld-%d", len(tasks)), now.Add(d))
			tk.Type = typ
			tasks = append(tasks, tk)
		}
	}
	add("mail.send", 3, 30*time.Second)  // bucket 0 of a 1m step
	add("mail.send", 2, 90*time.Second)  // bucket 1
	add("sms.send", 4, 150*time.Second)  // bucket 2
	add("sms.send", 5, 10*time.Minute)   // past a 5m horizon
	add("mail.send", 6, -10*time.Minute) // overdue (never taken here)
	scheduleAll(t, s, tasks)
	l, err := s.Load(t.Context(), LoadQuery{Horizon: 5 * time.Minute, Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l.Overdue != 6 || !slices.Equal(l.Buckets, []int64{3, 2, 4, 0, 0}) || l.Sampled {
		t.Fatalf("overdue %d buckets %v sampled %v", l.Overdue, l.Buckets, l.Sampled)
	}
	if m := l.Types["mail.send"]; m == nil || m.Overdue != 6 || !slices.Equal(m.Counts, []int64{3, 2, 0, 0, 0}) {
		t.Fatalf("mail.send %+v", m)
	}
	if m := l.Types["sms.send"]; m == nil || m.Overdue != 0 || !slices.Equal(m.Counts, []int64{0, 0, 4, 0, 0}) {
		t.Fatalf("sms.send %+v", m)
	}
	if len(l.Types) != 2 {
		t.Fatalf("types %v", l.Types)
	}
	// an hour: the fixture's scheduled and retrying tasks come in, not
	// its parked one; a step that does not divide the horizon leaves a
	// shorter last bucket
	l, err = s.Load(t.Context(), LoadQuery{Horizon: 70 * time.Minute, Step: 30 * time.Minute, Type: "order.cancel"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Buckets, []int64{14, 2, 0}) || len(l.Types) != 1 || !slices.Equal(l.Types["order.cancel"].Counts, []int64{0, 2, 0}) {
		t.Fatalf("hour: %v %+v", l.Buckets, l.Types["order.cancel"])
	}
	// a cap below the members in range: sampled
	l, err = s.Load(t.Context(), LoadQuery{Horizon: 5 * time.Minute, Step: time.Minute, Cap: 1})
	if err != nil || !l.Sampled || l.Overdue != 6 {
		t.Fatalf("capped: %+v %v", l, err)
	}
}

// testCensusHistory: tasks finished through Finish land in the step of
// the time they finished: succeeded by their done-set score less the
// retention, dead by their dead-set score.
func testCensusHistory(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4, Retention: time.Hour})
	now := redisNow(t, s)
	var tasks []*task.Task
	for i := range 5 {
		tasks = append(tasks, mk(fmt.Sprintf("hist-%d", i), now.Add(-time.Second)))
	}
	scheduleAll(t, s, tasks)
	before := redisNow(t, s)
	for i, f := range takeAll(t, s, 1) {
		k := Succeeded
		if i >= 3 {
			k = Dead
		}
		mustFinish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: k, Error: "x"})
	}
	after := redisNow(t, s)
	ps, err := s.History(t.Context(), 10*time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 10 {
		t.Fatalf("%d points", len(ps))
	}
	var ok, dead int64
	for _, p := range ps {
		if p.At.Second() != 0 || p.At.Nanosecond() != 0 {
			t.Fatalf("point at %v: not on a minute", p.At)
		}
		if p.Succeeded+p.Dead > 0 && (p.At.After(after) || p.At.Add(time.Minute).Before(before.Truncate(time.Minute))) {
			t.Fatalf("point %v holds finishes made between %v and %v", p, before, after)
		}
		ok += p.Succeeded
		dead += p.Dead
	}
	if ok != 3 || dead != 2 {
		t.Fatalf("succeeded %d dead %d: %+v", ok, dead, ps)
	}
	if last := ps[len(ps)-1].At; last.After(after) || last.Add(time.Minute).Before(after) {
		t.Fatalf("last point %v: not the minute in progress (%v)", last, after)
	}
}

// testSearch: ids with glob characters across shards and states; paging
// with small limits and budgets finds every match exactly once.
func testSearch(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 8})
	statesFixture(t, s) // st-s, st-r, st-f, st-p, st-d, st-S, st-c
	now := redisNow(t, s)
	var tasks []*task.Task
	var want []string
	for i := range 150 {
		id := fmt.Sprintf("a*[%d", i)
		want = append(want, id)
		tasks = append(tasks, mk(id, now.Add(time.Hour)))
	}
	for _, id := range []string{"a*b", "ab[1", "a?[1", "xa*[1", "a\\*[1", "a*]1"} {
		tasks = append(tasks, mk(id, now.Add(time.Hour)))
	}
	scheduleAll(t, s, tasks)
	slices.Sort(want)
	for _, c := range []struct{ limit, budget int }{{1000, 0}, {7, 0}, {1000, 5}, {3, 20}} {
		var got []string
		q := SearchQuery{Prefix: "a*[", Limit: c.limit, Budget: c.budget}
		for page := 0; ; page++ {
			if page > 2000 {
				t.Fatal("search does not end")
			}
			p, err := s.Search(t.Context(), q)
			if err != nil {
				t.Fatalf("limit %d budget %d: %v", c.limit, c.budget, err)
			}
			if len(p.Tasks) > c.limit || !slices.IsSortedFunc(p.Tasks, func(a, b Listed) int { return compareIDs(a.Task.ID, b.Task.ID) }) {
				t.Fatalf("page of %d tasks, limit %d, sorted %v", len(p.Tasks), c.limit, listedIDs(p.Tasks))
			}
			got = append(got, listedIDs(p.Tasks)...)
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d budget %d: found %d, want %d: %v", c.limit, c.budget, len(got), len(want), got)
		}
	}
	// every state, with what Get answers
	p, err := s.Search(t.Context(), SearchQuery{Prefix: "st-"})
	if err != nil || len(p.Tasks) != 7 || p.Next != "" || p.Scanned < 7 {
		t.Fatalf("st-: %v %v %+v", listedIDs(p.Tasks), err, p)
	}
	for _, l := range p.Tasks {
		g, err := s.Get(t.Context(), l.Task.ID)
		if err != nil || g.State != l.Task.State || (g.State == task.StateDead) != !l.DiedAt.IsZero() || g.LastError != l.Task.LastError {
			t.Fatalf("%s: found %+v, get %+v %v", l.Task.ID, l.Task, g, err)
		}
	}
	if _, err := s.Search(t.Context(), SearchQuery{Prefix: "b", Cursor: mustNext(t, s, "a*[")}); err == nil {
		t.Fatal("a cursor of another prefix accepted")
	}
	if _, err := s.Search(t.Context(), SearchQuery{Prefix: "a", Cursor: "!!"}); err == nil {
		t.Fatal("a bad cursor accepted")
	}
}

func compareIDs(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mustNext(t *testing.T, s *Store, prefix string) string {
	t.Helper()
	p, err := s.Search(t.Context(), SearchQuery{Prefix: prefix, Limit: 1})
	if err != nil || p.Next == "" {
		t.Fatalf("search %q: %+v %v", prefix, p, err)
	}
	return p.Next
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*[b]?\-^c`); got != `a\*\[b\]\?\\\-\^c` {
		t.Fatalf("escaped %q", got)
	}
}
