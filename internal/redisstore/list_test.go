package redisstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Listing tasks with List's cursor, on a standalone redis-server and on a
// 3-master Redis Cluster.

func TestListStandalone(t *testing.T) {
	listSuite(t, testenv.StartRedis(t).Client(t))
}

func TestListCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	rdb := c.Client(t)
	t.Run("StableWalk", func(t *testing.T) { testListStableWalk(t, rdb) })
	t.Run("Ties", func(t *testing.T) { testListTies(t, rdb) })
	t.Run("States", func(t *testing.T) { testListStates(t, rdb) })
	t.Run("MergedOrder", func(t *testing.T) { testListMergedOrder(t, rdb) })
}

func listSuite(t *testing.T, rdb redis.UniversalClient) {
	t.Run("StableWalk", func(t *testing.T) { t.Parallel(); testListStableWalk(t, rdb) })
	t.Run("Ties", func(t *testing.T) { t.Parallel(); testListTies(t, rdb) })
	t.Run("ChangesDuringWalk", func(t *testing.T) { t.Parallel(); testListChangesDuringWalk(t, rdb) })
	t.Run("States", func(t *testing.T) { t.Parallel(); testListStates(t, rdb) })
	t.Run("Filters", func(t *testing.T) { t.Parallel(); testListFilters(t, rdb) })
	t.Run("FiredWalk", func(t *testing.T) { t.Parallel(); testListFiredWalk(t, rdb) })
	t.Run("BadCursors", func(t *testing.T) { t.Parallel(); testListBadCursors(t, rdb) })
	t.Run("Budget", func(t *testing.T) { t.Parallel(); testListBudget(t, rdb) })
	t.Run("Bulk", func(t *testing.T) { t.Parallel(); testBulk(t, rdb) })
	t.Run("MergedOrder", func(t *testing.T) { t.Parallel(); testListMergedOrder(t, rdb) })
	t.Run("Skewed", func(t *testing.T) { t.Parallel(); testListSkewed(t, rdb) })
	t.Run("DeadOrder", func(t *testing.T) { t.Parallel(); testListDeadOrder(t, rdb) })
}

// walkAll lists every page of q; it fails after maxPages.
func walkAll(t *testing.T, s *Store, q ListQuery, maxPages int, between func(page int)) []Listed {
	t.Helper()
	var all []Listed
	for page := 0; ; page++ {
		if page == maxPages {
			t.Fatalf("walk not done after %d pages", maxPages)
		}
		p, err := s.List(t.Context(), q)
		if err != nil {
			t.Fatalf("list page %d: %v", page, err)
		}
		if limit := cmp.Or(q.Limit, listDefaultLimit); len(p.Tasks) > limit {
			t.Fatalf("page %d holds %d tasks, limit %d", page, len(p.Tasks), q.Limit)
		}
		all = append(all, p.Tasks...)
		if p.Next == "" {
			return all
		}
		q.Cursor = p.Next
		if between != nil {
			between(page)
		}
	}
}

func listedIDs(ls []Listed) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Task.ID
	}
	return out
}

// checkOrder checks that ls go by due time, bucket and id across every
// shard (the due sets' order, merged).
func checkOrder(t *testing.T, ls []Listed) {
	t.Helper()
	for i := 1; i < len(ls); i++ {
		a, b := ls[i-1].Task, ls[i].Task
		ka := []int64{task.Millis(a.DueAt), int64(bucketOf(a.ID))}
		kb := []int64{task.Millis(b.DueAt), int64(bucketOf(b.ID))}
		if c := slices.Compare(ka, kb); c > 0 || (c == 0 && a.ID >= b.ID) {
			t.Fatalf("out of order: %s (%v, %d, shard %d) before %s (%v, %d, shard %d)", a.ID, a.DueAt, ka[1], a.Shard, b.ID, b.DueAt, kb[1], b.Shard)
		}
	}
}

func scheduleAll(t *testing.T, s *Store, tasks []*task.Task) {
	t.Helper()
	subs := make([]Submit, len(tasks))
	for i, tk := range tasks {
		subs[i] = Submit{Task: tk}
	}
	res, err := s.Schedule(t.Context(), subs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

func testListStableWalk(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 8})
	now := redisNow(t, s).Truncate(time.Millisecond)
	const n = 3000
	var tasks []*task.Task
	for i := range n {
		// 50 distinct due times: many ties in the millisecond
		tasks = append(tasks, mk(fmt.Sprintf("w-%d", i), now.Add(time.Hour+time.Duration(i%50)*time.Millisecond)))
	}
	scheduleAll(t, s, tasks)
	all := walkAll(t, s, ListQuery{State: task.StateScheduled, Limit: 7}, 2*n/7+20, nil)
	if len(all) != n {
		t.Fatalf("listed %d tasks, want %d", len(all), n)
	}
	seen := map[string]bool{}
	for _, l := range all {
		if seen[l.Task.ID] {
			t.Fatalf("%s listed twice", l.Task.ID)
		}
		seen[l.Task.ID] = true
		if l.Task.State != task.StateScheduled || l.Task.Shard != s.Shard(l.Task.ID) || l.Task.Type != "order.cancel" {
			t.Fatalf("listed %+v", l.Task)
		}
	}
	checkOrder(t, all)
	// "" lists scheduled and retrying: the same set
	if got := walkAll(t, s, ListQuery{Limit: 1000}, 20, nil); len(got) != n {
		t.Fatalf("state \"\": %d tasks", len(got))
	}
}

// testListMergedOrder: tasks spread over 16 shards, due in an order that
// has nothing to do with their shards. The first page is the earliest due
// tasks of all shards, in order; paging through in pages of every size
// gives every task once, in order; so does a filtered walk.
func testListMergedOrder(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 16})
	now := redisNow(t, s).Truncate(time.Millisecond)
	const n = 1200
	var tasks []*task.Task
	for i := range n {
		// due times a multiplicative permutation of 0..n-1 ms, so the
		// creation order, the id order and the shards tell nothing
		tk := mk(fmt.Sprintf("mo-%d", i), now.Add(time.Hour+time.Duration(i*7919%n)*time.Millisecond))
		if i%3 == 0 {
			tk.Type = "mail.send"
		}
		tasks = append(tasks, tk)
	}
	scheduleAll(t, s, tasks)
	byDue := slices.Clone(tasks)
	slices.SortFunc(byDue, func(a, b *task.Task) int { return a.DueAt.Compare(b.DueAt) })
	ids := func(ts []*task.Task) []string {
		out := make([]string, len(ts))
		for i, tk := range ts {
			out[i] = tk.ID
		}
		return out
	}
	shards := map[int]bool{}
	first, err := s.List(t.Context(), ListQuery{Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range first.Tasks {
		shards[l.Task.Shard] = true
	}
	if got, want := listedIDs(first.Tasks), ids(byDue[:20]); !slices.Equal(got, want) || first.Next == "" {
		t.Fatalf("first page: %v, want the 20 earliest due %v", got, want)
	}
	if len(shards) < 8 {
		t.Fatalf("the first page holds tasks of %d shards only", len(shards))
	}
	for _, limit := range []int{1, 7, 100, 1000} {
		all := walkAll(t, s, ListQuery{State: task.StateScheduled, Limit: limit}, n/limit+20, nil)
		if got := listedIDs(all); !slices.Equal(got, ids(byDue)) {
			t.Fatalf("limit %d: %d tasks listed, not every task in due order", limit, len(got))
		}
		checkOrder(t, all)
	}
	var mail []*task.Task
	for _, tk := range byDue {
		if tk.Type == "mail.send" {
			mail = append(mail, tk)
		}
	}
	if got := listedIDs(walkAll(t, s, ListQuery{Type: "mail.send", Limit: 9}, n, nil)); !slices.Equal(got, ids(mail)) {
		t.Fatalf("by type: %d tasks listed, want %d in due order", len(got), len(mail))
	}
}

// testListSkewed: on 16 shards, one shard holds the earliest 500 tasks
// and the others a few later ones: the merge reads that shard again and
// again within a page (its windows double) and keeps the order.
func testListSkewed(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 16})
	now := redisNow(t, s).Truncate(time.Millisecond)
	var tasks []*task.Task
	for i := 0; len(tasks) < 500; i++ {
		if id := fmt.Sprintf("sk-%d", i); s.Shard(id) == 5 {
			tasks = append(tasks, mk(id, now.Add(time.Hour+time.Duration(len(tasks))*time.Millisecond)))
		}
	}
	for i := range 60 {
		tasks = append(tasks, mk(fmt.Sprintf("late-%d", i), now.Add(2*time.Hour+time.Duration(i)*time.Millisecond)))
	}
	scheduleAll(t, s, tasks)
	for _, limit := range []int{3, 250, 1000} {
		all := walkAll(t, s, ListQuery{Limit: limit}, len(tasks)/limit+20, nil)
		if len(all) != len(tasks) {
			t.Fatalf("limit %d: %d listed, want %d", limit, len(all), len(tasks))
		}
		checkOrder(t, all)
		for i, l := range all[:500] {
			if l.Task.ID != tasks[i].ID {
				t.Fatalf("limit %d: #%d is %s, want %s", limit, i, l.Task.ID, tasks[i].ID)
			}
		}
	}
}

// testListDeadOrder: tasks of 16 shards die in three rounds a few
// milliseconds apart; the dead walk lists them by time of death across
// the shards (every round before the next), each with its died_at.
func testListDeadOrder(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 16})
	round := map[string]int{}
	for r := range 3 {
		now := redisNow(t, s)
		for i := range 40 {
			id := fmt.Sprintf("do-%d-%d", r, i)
			round[id] = r
			schedule1(t, s, mk(id, now.Add(-time.Second)))
		}
		for _, f := range takeAll(t, s, 1) {
			mustFinish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: Dead, Error: "round " + fmt.Sprint(r)})
		}
		// the next round dies at a later millisecond
		end := redisNow(t, s)
		for deadline := time.Now().Add(5 * time.Second); !redisNow(t, s).After(end.Add(2 * time.Millisecond)); {
			if time.Now().After(deadline) {
				t.Fatal("redis time does not advance")
			}
		}
	}
	for _, limit := range []int{7, 1000} {
		all := walkAll(t, s, ListQuery{State: task.StateDead, Limit: limit}, 200, nil)
		if len(all) != len(round) {
			t.Fatalf("limit %d: %d dead listed, want %d", limit, len(all), len(round))
		}
		shards := map[int]bool{}
		for i, l := range all {
			shards[l.Task.Shard] = true
			if l.Task.State != task.StateDead || l.DiedAt.IsZero() {
				t.Fatalf("listed %+v died at %v", l.Task, l.DiedAt)
			}
			if i == 0 {
				continue
			}
			p := all[i-1]
			if c := p.DiedAt.Compare(l.DiedAt); c > 0 || (c == 0 && p.Task.ID >= l.Task.ID) {
				t.Fatalf("limit %d: %s (died %v) before %s (died %v)", limit, p.Task.ID, p.DiedAt, l.Task.ID, l.DiedAt)
			}
			if round[p.Task.ID] > round[l.Task.ID] {
				t.Fatalf("limit %d: %s of round %d before %s of round %d", limit, p.Task.ID, round[p.Task.ID], l.Task.ID, round[l.Task.ID])
			}
		}
		if len(shards) < 12 {
			t.Fatalf("the dead tasks are on %d shards only", len(shards))
		}
	}
}

func testListTies(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	due := redisNow(t, s).Add(time.Hour).Truncate(time.Millisecond)
	// 1500 ids of shard 1 in one bucket, due at the same millisecond: one
	// score, more entries than a call's budget
	var ids []string
	for i, want := 0, -1; len(ids) < 1500; i++ {
		id := fmt.Sprintf("tie-%d", i)
		if ShardOf(id, 2) != 1 {
			continue
		}
		if want < 0 {
			want = bucketOf(id)
		}
		if bucketOf(id) == want {
			ids = append(ids, id)
		}
	}
	var tasks []*task.Task
	for _, id := range ids {
		tasks = append(tasks, mk(id, due))
	}
	scheduleAll(t, s, tasks)
	slices.Sort(ids)
	for _, limit := range []int{7, 1000} {
		got := listedIDs(walkAll(t, s, ListQuery{Limit: limit}, 2*len(ids)/limit+10, nil))
		if !slices.Equal(got, ids) {
			t.Fatalf("limit %d: listed %d ids, want the %d ties in id order", limit, len(got), len(ids))
		}
	}
	// the position's task leaves the set between pages: the walk resumes
	// right after it (binary search among the ties)
	q := ListQuery{Limit: 10}
	var got []string
	for page := 0; page < 1000; page++ {
		p, err := s.List(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, listedIDs(p.Tasks)...)
		if p.Next == "" {
			break
		}
		if page%3 == 0 {
			last := p.Tasks[len(p.Tasks)-1].Task.ID
			if err := s.Cancel(t.Context(), last); err != nil {
				t.Fatal(err)
			}
		}
		q.Cursor = p.Next
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("with cancels: listed %d ids, want %d in order", len(got), len(ids))
	}
}

func testListChangesDuringWalk(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	var stay, due []*task.Task
	for i := range 1000 {
		stay = append(stay, mk(fmt.Sprintf("stay-%d", i), now.Add(time.Hour+time.Duration(i)*time.Millisecond)))
	}
	for i := range 300 {
		due = append(due, mk(fmt.Sprintf("due-%d", i), now.Add(-time.Minute+time.Duration(i)*time.Millisecond)))
	}
	scheduleAll(t, s, append(slices.Clone(stay), due...))
	added := 0
	all := walkAll(t, s, ListQuery{State: task.StateScheduled, Limit: 13}, 500, func(page int) {
		// new tasks before and behind the walk, and a take of every shard
		var more []*task.Task
		for i := range 5 {
			more = append(more, mk(fmt.Sprintf("new-%d-%d", page, i), now.Add(time.Duration(page*5+i)*time.Minute)))
		}
		scheduleAll(t, s, more)
		added += len(more)
		if page%4 == 0 {
			for sh := range s.Shards() {
				if _, err := s.Take(ctx, sh, 1, 20, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	seen := map[string]int{}
	for _, l := range all {
		seen[l.Task.ID]++
		if seen[l.Task.ID] > 1 {
			t.Fatalf("%s listed twice", l.Task.ID)
		}
	}
	for _, tk := range stay {
		if seen[tk.ID] != 1 {
			t.Fatalf("%s stayed scheduled throughout but was listed %d times", tk.ID, seen[tk.ID])
		}
	}
	if added == 0 {
		t.Fatal("nothing added during the walk")
	}
}

// statesFixture makes one task of each state on a 4-shard store.
func statesFixture(t *testing.T, s *Store) map[task.State]string {
	t.Helper()
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	ids := map[task.State]string{
		task.StateScheduled: "st-s", task.StateRetrying: "st-r", task.StateFired: "st-f",
		task.StatePaused: "st-p", task.StateDead: "st-d", task.StateSucceeded: "st-S", task.StateCancelled: "st-c",
	}
	for st, id := range ids {
		due := now.Add(-time.Second)
		if st == task.StateScheduled || st == task.StateCancelled {
			due = now.Add(time.Hour)
		}
		schedule1(t, s, mk(id, due))
	}
	fired := map[string]uint64{}
	for _, f := range takeAll(t, s, 1) {
		fired[f.ID] = f.Gen
	}
	if len(fired) != 5 {
		t.Fatalf("took %v", fired)
	}
	for _, f := range []Finish{
		{ID: "st-r", Kind: Retry, Due: now.Add(time.Hour), Error: "boom"},
		{ID: "st-d", Kind: Dead, Error: "dead for good"},
		{ID: "st-S", Kind: Succeeded},
	} {
		f.Gen = fired[f.ID]
		mustFinish(t, s, f)
	}
	if n, err := s.ParkMany(ctx, []Park{{ID: "st-p", Gen: fired["st-p"], Type: "order.cancel", Shard: s.Shard("st-p")}}); err != nil || n != 1 {
		t.Fatalf("park: %d %v", n, err)
	}
	if err := s.Cancel(ctx, "st-c"); err != nil {
		t.Fatal(err)
	}
	return ids
}

func testListStates(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	ids := statesFixture(t, s)
	for st, id := range ids {
		for _, limit := range []int{1, 100} {
			got := walkAll(t, s, ListQuery{State: st, Limit: limit}, 50, nil)
			if len(got) != 1 || got[0].Task.ID != id || got[0].Task.State != st {
				t.Fatalf("state %s limit %d: %v", st, limit, listedIDs(got))
			}
			l := got[0]
			if g, err := s.Get(t.Context(), id); err != nil || g.State != st || !g.DueAt.Equal(l.Task.DueAt) || g.LastError != l.Task.LastError || g.Shard != l.Task.Shard {
				t.Fatalf("state %s: listed %+v, get %+v %v", st, l.Task, g, err)
			}
			if (st == task.StateDead) != !l.DiedAt.IsZero() {
				t.Fatalf("state %s: died at %v", st, l.DiedAt)
			}
		}
	}
	if got := walkAll(t, s, ListQuery{State: task.StateRetrying}, 5, nil); got[0].Task.LastError != "boom" || got[0].Task.Attempt != 2 {
		t.Fatalf("retrying: %+v", got[0].Task)
	}
	got := listedIDs(walkAll(t, s, ListQuery{}, 5, nil))
	slices.Sort(got)
	if !slices.Equal(got, []string{"st-r", "st-s"}) {
		t.Fatalf("state \"\": %v", got)
	}
	if _, err := s.List(t.Context(), ListQuery{State: "journaled"}); err == nil {
		t.Fatal("journaled listed")
	}
}

func testListFiredWalk(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	now := redisNow(t, s)
	var tasks []*task.Task
	for i := range 1400 {
		due := now.Add(-time.Second)
		if i%7 == 0 {
			due = now.Add(time.Hour) // not fired
		}
		tk := mk(fmt.Sprintf("fw-%d", i), due)
		if i%5 == 0 {
			tk.Type = "mail.send"
		}
		tasks = append(tasks, tk)
	}
	scheduleAll(t, s, tasks)
	fired := fireAll(t, s)
	for _, typ := range []string{"", "mail.send"} {
		var want []string
		for id, tk := range fired {
			if typ == "" || tk.Type == typ {
				want = append(want, id)
			}
		}
		got := walkAll(t, s, ListQuery{State: task.StateFired, Type: typ, Limit: 7}, 1000, nil)
		ids := listedIDs(got)
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("type %q: listed %d fired tasks, want %d", typ, len(ids), len(want))
		}
		for _, l := range got {
			if l.Task.State != task.StateFired || l.Task.Shard != s.Shard(l.Task.ID) {
				t.Fatalf("listed %+v", l.Task)
			}
		}
	}
}

func testListFilters(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	now := redisNow(t, s).Truncate(time.Second)
	var tasks []*task.Task
	for i := range 400 {
		tk := mk(fmt.Sprintf("flt-%d", i), now.Add(time.Hour+time.Duration(i)*time.Second))
		if i%2 == 1 {
			tk.Type = "mail.send"
		}
		tasks = append(tasks, tk)
	}
	scheduleAll(t, s, tasks)
	after, before := now.Add(time.Hour+100*time.Second), now.Add(time.Hour+200*time.Second)
	for _, q := range []ListQuery{
		{Type: "mail.send"},
		{DueAfter: after},
		{DueBefore: before},
		{Type: "order.cancel", DueAfter: after, DueBefore: before},
		{State: task.StateScheduled, DueAfter: after.Add(-500 * time.Microsecond), DueBefore: before.Add(time.Microsecond)},
		{Type: "none"},
	} {
		var want []string
		for _, tk := range tasks {
			if (q.Type == "" || tk.Type == q.Type) && (q.DueAfter.IsZero() || !tk.DueAt.Before(q.DueAfter)) &&
				(q.DueBefore.IsZero() || tk.DueAt.Before(q.DueBefore)) {
				want = append(want, tk.ID)
			}
		}
		q.Limit = 9
		got := listedIDs(walkAll(t, s, q, 200, nil))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: listed %d, want %d", q, len(got), len(want))
		}
	}
}

func testListBadCursors(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	now := redisNow(t, s)
	for i := range 30 {
		schedule1(t, s, mk(fmt.Sprintf("bc-%d", i), now.Add(time.Hour)))
	}
	q := ListQuery{State: task.StateScheduled, Type: "order.cancel", Limit: 2}
	p, err := s.List(t.Context(), q)
	if err != nil || p.Next == "" {
		t.Fatalf("first page: %+v %v", p, err)
	}
	good, _ := decodeCursor(p.Next, q, filterHash(q))
	craft := func(f func(c *listCursor)) string {
		c := good
		f(&c)
		return c.encode()
	}
	for name, tc := range map[string]struct {
		q      ListQuery
		cursor string
	}{
		"garbage":        {q, "%%%not-a-cursor"},
		"not json":       {q, base64.RawURLEncoding.EncodeToString([]byte("hello"))},
		"trailing":       {q, base64.RawURLEncoding.EncodeToString([]byte(`{"v":1}{}`))},
		"unknown field":  {q, base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"x":1}`))},
		"too long":       {q, string(make([]byte, maxCursorLen+1))},
		"other state":    {ListQuery{State: task.StateRetrying, Type: "order.cancel", Limit: 2}, p.Next},
		"no state":       {ListQuery{Type: "order.cancel", Limit: 2}, p.Next},
		"other type":     {ListQuery{State: task.StateScheduled, Type: "mail", Limit: 2}, p.Next},
		"other due":      {ListQuery{State: task.StateScheduled, Type: "order.cancel", DueAfter: now, Limit: 2}, p.Next},
		"huge shard":     {q, craft(func(c *listCursor) { c.Sh = 1 << 20 })},
		"negative shard": {q, craft(func(c *listCursor) { c.Sh = -1 })},
		"bucket":         {q, craft(func(c *listCursor) { c.B = BucketsPerShard })},
		"version":        {q, craft(func(c *listCursor) { c.V = 3 })},
		"shard by shard": {q, craft(func(c *listCursor) { c.V = cursorVersion })},
		"merged shard":   {q, craft(func(c *listCursor) { c.Sh = 1 })},
		"long id":        {q, craft(func(c *listCursor) { c.ID = string(make([]byte, task.MaxIDLen+1)) })},
		"id w/o pos":     {q, craft(func(c *listCursor) { c.At = false })},
	} {
		tc.q.Cursor = tc.cursor
		if _, err := s.List(t.Context(), tc.q); !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: %v, want ErrBadCursor", name, err)
		}
	}
	// a cursor of the shard-by-shard walk that sorted-set states had
	// before the merge: refused, saying why
	q.Cursor = craft(func(c *listCursor) { c.V = cursorVersion })
	if _, err := s.List(t.Context(), q); err == nil || !strings.Contains(err.Error(), "shard by shard") {
		t.Fatalf("an old cursor: %v", err)
	}
	// fired tasks are still walked shard by shard: a shard beyond the map
	// but within MaxShards ends the walk
	fq := ListQuery{State: task.StateFired}
	fq.Cursor = listCursor{V: cursorVersion, S: string(fq.State), F: filterHash(fq), Sh: 100}.encode()
	if p, err := s.List(t.Context(), fq); err != nil || p.Next != "" || len(p.Tasks) != 0 {
		t.Fatalf("shard past the map: %+v %v", p, err)
	}
	fq.Cursor = listCursor{V: mergeVersion, S: string(fq.State), F: filterHash(fq)}.encode()
	if _, err := s.List(t.Context(), fq); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("a merged cursor for fired: %v", err)
	}
}

func testListBudget(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 1})
	now := redisNow(t, s)
	var tasks []*task.Task
	for i := range 2500 {
		tk := mk(fmt.Sprintf("bu-%d", i), now.Add(time.Hour+time.Duration(i)*time.Millisecond))
		if i == 2400 {
			tk.Type = "rare"
		}
		tasks = append(tasks, tk)
	}
	scheduleAll(t, s, tasks)
	q := ListQuery{Type: "rare", Limit: 5}
	pages := 0
	var found []string
	for {
		p, err := s.List(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		found = append(found, listedIDs(p.Tasks)...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	// 2500 entries, 1000 examined per call
	if pages != 3 || !slices.Equal(found, []string{"bu-2400"}) {
		t.Fatalf("%d pages, found %v", pages, found)
	}
}

func testBulk(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	now := redisNow(t, s)
	var ids []string
	for i := range 50 {
		id := fmt.Sprintf("bk-%d", i)
		ids = append(ids, id)
		due := now.Add(time.Hour)
		if i >= 40 {
			due = now.Add(-time.Second)
		}
		schedule1(t, s, mk(id, due))
	}
	fired := takeAll(t, s, 1)
	for _, f := range fired {
		mustFinish(t, s, Finish{ID: f.ID, Gen: f.Gen, Kind: Dead, Error: "x"})
	}
	withMissing := append(slices.Clone(ids), "nope", "nope2")
	n, err := s.CancelMany(ctx, withMissing)
	if err != nil || n != 40 {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if n, err := s.CancelMany(ctx, withMissing); err != nil || n != 0 {
		t.Fatalf("cancel again: %d %v", n, err)
	}
	if n, err := s.RedriveMany(ctx, withMissing[35:45]); err != nil || n != 5 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	if n, err := s.DeleteDeadMany(ctx, withMissing); err != nil || n != 5 {
		t.Fatalf("delete dead: %d %v", n, err)
	}
	if n, err := s.DeleteDeadMany(ctx, withMissing); err != nil || n != 0 {
		t.Fatalf("delete dead again: %d %v", n, err)
	}
	// an infrastructure error is an error
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.CancelMany(cctx, ids); err == nil {
		t.Fatal("cancelled context: no error")
	}
}

func FuzzDecodeCursor(f *testing.F) {
	q := ListQuery{State: task.StateDead, Type: "t"}
	h := filterHash(q)
	f.Add(listCursor{V: 2, S: "dead", F: h, At: true, Sc: 12.5, ID: "x"}.encode())
	f.Add(listCursor{V: 1, S: "dead", F: h, Sh: 3, At: true, Sc: 12.5, ID: "x"}.encode())
	f.Add(listCursor{V: 1, S: "dead", F: h, Sh: 4095, B: 1023, C: 77, ID: "y"}.encode())
	f.Add("")
	f.Add("eyJ2IjoxfQ")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"s":"dead","f":1,"sh":1e400}`)))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s, q, h)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v does not wrap ErrBadCursor", err)
			}
			return
		}
		if c.V != mergeVersion || c.Sh != 0 || c.B < 0 || c.B >= BucketsPerShard || len(c.ID) > task.MaxIDLen || math.IsNaN(c.Sc) {
			t.Fatalf("accepted %+v", c)
		}
		c2, err := decodeCursor(c.encode(), q, h)
		if err != nil || c2 != c {
			t.Fatalf("round trip: %+v -> %+v %v", c, c2, err)
		}
	})
}
