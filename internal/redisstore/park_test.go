package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Parking the fired tasks of a paused type, and unparking them, on a
// standalone redis-server and on a 3-master Redis Cluster.

func TestParkStandalone(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	t.Run("ParkAndUnpark", func(t *testing.T) { t.Parallel(); testParkAndUnpark(t, rdb) })
	t.Run("StaleEntries", func(t *testing.T) { t.Parallel(); testParkStaleEntries(t, rdb) })
	t.Run("OnlyFiredTasks", func(t *testing.T) { t.Parallel(); testParkOnlyFired(t, rdb) })
	t.Run("AncientDue", func(t *testing.T) { t.Parallel(); testParkAncientDue(t, rdb) })
	t.Run("Stats", func(t *testing.T) { t.Parallel(); testParkStats(t, rdb) })
	t.Run("MovedByGrowth", func(t *testing.T) { t.Parallel(); testParkMovedByGrowth(t, rdb) })
	t.Run("LeavingTheIndex", func(t *testing.T) { t.Parallel(); testParkLeavingTheIndex(t, rdb) })
}

func TestParkCluster(t *testing.T) {
	rdb := testenv.StartRedisCluster(t).Client(t)
	t.Run("ParkAndUnpark", func(t *testing.T) { testParkAndUnpark(t, rdb) })
	t.Run("MovedByGrowth", func(t *testing.T) { testParkMovedByGrowth(t, rdb) })
	t.Run("LeavingTheIndex", func(t *testing.T) { testParkLeavingTheIndex(t, rdb) })
}

// fireAll takes every due task of every shard and returns the fired tasks
// by id.
func fireAll(t *testing.T, s *Store) map[string]*task.Task {
	t.Helper()
	out := map[string]*task.Task{}
	for sh := range s.Shards() {
		for {
			tk := mustTake(t, s, sh, 1)
			for _, x := range tk.Tasks {
				out[x.ID] = x
			}
			if len(tk.Tasks) == 0 {
				break
			}
		}
	}
	return out
}

func parksOf(ts map[string]*task.Task, typ, owner string, ids ...string) []Park {
	var ps []Park
	for _, id := range ids {
		tk := ts[id]
		ps = append(ps, Park{ID: id, Gen: tk.Gen, Type: typ, Owner: owner, Shard: tk.Shard})
	}
	return ps
}

func mustPark(t *testing.T, s *Store, ps []Park, want int) {
	t.Helper()
	n, err := s.ParkMany(t.Context(), ps)
	if err != nil || n != want {
		t.Fatalf("park: %d %v, want %d", n, err, want)
	}
}

func mustUnpark(t *testing.T, s *Store, typ string, want int) {
	t.Helper()
	n, err := s.Unpark(t.Context(), typ)
	if err != nil || n != want {
		t.Fatalf("unpark %s: %d %v, want %d", typ, n, err, want)
	}
}

func testParkAndUnpark(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	var ids, others []string
	for i := range 40 {
		tk := mk(fmt.Sprintf("pk-%02d", i), now.Add(-time.Minute+time.Duration(i)*time.Millisecond))
		tk.Type = "mail.send"
		if i%4 == 3 {
			tk.Type = "other"
			others = append(others, tk.ID)
		} else {
			ids = append(ids, tk.ID)
		}
		schedule1(t, s, tk)
	}
	fired := fireAll(t, s)
	if len(fired) != 40 {
		t.Fatalf("fired %d", len(fired))
	}
	// the worker claimed them, then saw the type paused
	var claims []Claim
	for _, id := range ids {
		claims = append(claims, Claim{ID: id, Gen: fired[id].Gen, TTL: time.Minute, Owner: "w1", Shard: fired[id].Shard, ShardSet: true})
	}
	if res, err := s.ClaimMany(ctx, claims); err != nil || res[0].Code != Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	mustPark(t, s, parksOf(fired, "mail.send", "w1", ids...), len(ids))
	for _, id := range ids {
		g, err := s.Get(ctx, id)
		if err != nil || g.State != task.StatePaused || !g.DueAt.Equal(fired[id].DueAt) || g.Gen != fired[id].Gen+1 || g.Attempt != 1 {
			t.Fatalf("parked %s: %+v %v", id, g, err)
		}
		if who, _, err := s.ClaimHolder(ctx, id, fired[id].Gen); err != nil || who != "" {
			t.Fatalf("%s: claim left, held by %q (%v)", id, who, err)
		}
	}
	// the other type's tasks were not parked: still fired
	for _, id := range others {
		if g, err := s.Get(ctx, id); err != nil || g.State != task.StateFired {
			t.Fatalf("%s of another type: %+v %v, want fired", id, g, err)
		}
	}
	// no take fires them, though they are due
	if got := fireAll(t, s); len(got) != 0 {
		t.Fatalf("took parked tasks %v", got)
	}
	// the Kafka copy of the parked generation is stale
	res, err := s.ClaimMany(ctx, claims[:1])
	if err != nil || res[0].Code != ClaimStale {
		t.Fatalf("stale claim: %+v %v", res, err)
	}
	if _, err := s.Finish(ctx, Finish{ID: ids[0], Gen: fired[ids[0]].Gen, Kind: Succeeded}); !errors.Is(err, ErrStale) {
		t.Fatalf("stale finish: %v", err)
	}
	// parking again: the old generation is stale, the new one is not fired
	mustPark(t, s, parksOf(fired, "mail.send", "w1", ids...), 0)
	again := parksOf(fired, "mail.send", "", ids[0])
	again[0].Gen++
	mustPark(t, s, again, 0)

	pt, err := s.ParkedTypes(ctx)
	if err != nil || len(pt) != 1 || pt["mail.send"] != int64(len(ids)) {
		t.Fatalf("parked types: %v %v", pt, err)
	}
	paused := listedIDs(walkAll(t, s, ListQuery{State: task.StatePaused, Limit: 4}, 50, nil))
	if slices.Sort(paused); !slices.Equal(paused, ids) {
		t.Fatalf("listed paused %v", paused)
	}
	if got := walkAll(t, s, ListQuery{State: task.StatePaused, Type: "mail.send", DueAfter: fired[ids[5]].DueAt, DueBefore: fired[ids[6]].DueAt}, 50, nil); len(got) != 1 || got[0].Task.ID != ids[5] {
		t.Fatalf("paused in a due range: %v", listedIDs(got))
	}
	if got := walkAll(t, s, ListQuery{}, 50, nil); len(got) != 0 {
		t.Fatalf("parked tasks listed as waiting: %v", listedIDs(got))
	}

	// cancel and reschedule work on parked tasks
	if err := s.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	if _, err := s.Reschedule(ctx, ids[1], later, 0, false); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.Get(ctx, ids[1]); g.State != task.StateScheduled || !g.DueAt.Equal(later) {
		t.Fatalf("rescheduled parked: %+v", g)
	}
	if pt, err := s.ParkedTypes(ctx); err != nil || pt["mail.send"] != int64(len(ids)-2) {
		t.Fatalf("parked types after a cancel and a reschedule: %v %v, want %d", pt, err, len(ids)-2)
	}

	mustUnpark(t, s, "other", 0)
	mustUnpark(t, s, "mail.send", len(ids)-2)
	mustUnpark(t, s, "mail.send", 0)
	if pt, err := s.ParkedTypes(ctx); err != nil || len(pt) != 0 {
		t.Fatalf("parked types after unpark: %v %v", pt, err)
	}
	for sh := range s.Shards() {
		if m, _ := rdb.SMembers(ctx, s.k.ptypes(sh)).Result(); len(m) != 0 {
			t.Fatalf("shard %d ptypes %v", sh, m)
		}
	}
	for _, id := range ids[2:] {
		g, err := s.Get(ctx, id)
		if err != nil || g.State != task.StateScheduled || !g.DueAt.Equal(fired[id].DueAt) {
			t.Fatalf("unparked %s: %+v %v", id, g, err)
		}
	}
	// they fire again, in their original order, with the parked generation
	for sh := range s.Shards() {
		tk := mustTake(t, s, sh, 1)
		var got, want []string
		for _, x := range tk.Tasks {
			got = append(got, x.ID)
			if x.Gen != fired[x.ID].Gen+1 || x.Attempt != 1 {
				t.Fatalf("refired %+v", x)
			}
		}
		for _, id := range ids[2:] {
			if fired[id].Shard == sh {
				want = append(want, id)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("shard %d fired %v, want %v", sh, got, want)
		}
	}
}

func testParkStaleEntries(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 1})
	ctx := t.Context()
	now := redisNow(t, s)
	var ids []string
	for i := range 1200 { // more than two unpark pages
		ids = append(ids, fmt.Sprintf("se-%04d", i))
		schedule1(t, s, mk(ids[i], now.Add(-time.Second)))
	}
	fired := fireAll(t, s)
	mustPark(t, s, parksOf(fired, "order.cancel", "", ids...), len(ids))
	// some leave the parked state (and the index: see
	// testParkLeavingTheIndex)
	for _, id := range ids[:100] {
		if err := s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids[100:150] {
		if _, err := s.Reschedule(ctx, id, now.Add(time.Hour), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	pubsub := rdb.Subscribe(ctx, s.WakeChannel())
	defer pubsub.Close()
	if _, err := pubsub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	mustUnpark(t, s, "order.cancel", len(ids)-150)
	// the head moved from an hour ahead to the parked tasks' due time
	expectWake(t, pubsub.Channel(), fmt.Sprintf("0:%d", task.Millis(fired[ids[150]].DueAt)))
	if n, _ := rdb.ZCard(ctx, s.k.parked(0, "order.cancel")).Result(); n != 0 {
		t.Fatalf("%d index entries left", n)
	}
	mustUnpark(t, s, "order.cancel", 0)
	if got := len(fireAll(t, s)); got != len(ids)-150 {
		t.Fatalf("fired %d after unpark", got)
	}
}

// testParkLeavingTheIndex (issue 40): a parked task that a cancel, a
// reschedule or an update takes out of the parked state leaves its type's
// parked index at once, and the type leaves ptypes with the last one:
// GET /v1/types counted a cancelled parked task as parked until the type
// was resumed.
func testParkLeavingTheIndex(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	ids := []string{"li-cancel", "li-resched", "li-update", "li-stays"}
	// a type whose length takes a 2-byte uvarint in the body
	typ := "idx." + strings.Repeat("t", 200)
	for i, id := range ids {
		tk := mk(id, now.Add(-time.Minute+time.Duration(i)*time.Millisecond))
		tk.Type = typ
		schedule1(t, s, tk)
	}
	fired := fireAll(t, s)
	mustPark(t, s, parksOf(fired, typ, "", ids...), len(ids))
	parked := func(want int64) {
		t.Helper()
		pt, err := s.ParkedTypes(ctx)
		if err != nil || pt[typ] != want || (want == 0) != (len(pt) == 0) {
			t.Fatalf("parked types: %v %v, want %d", pt, err, want)
		}
	}
	parked(4)

	if err := s.Cancel(ctx, "li-cancel"); err != nil {
		t.Fatal(err)
	}
	parked(3)
	if _, err := s.Reschedule(ctx, "li-resched", now.Add(time.Hour), 0, false); err != nil {
		t.Fatal(err)
	}
	parked(2)
	up := mk("li-update", now.Add(2*time.Hour))
	up.Type, up.Payload = typ, []byte(`{"n":2}`)
	if r := schedule1(t, s, up); r.Outcome != Updated {
		t.Fatalf("update of a parked task: %+v", r)
	}
	parked(1)
	for _, id := range ids[1:3] {
		if g, err := s.Get(ctx, id); err != nil || g.State != task.StateScheduled {
			t.Fatalf("%s unparked: %+v %v", id, g, err)
		}
	}
	// the last one: the type leaves ptypes
	if err := s.Cancel(ctx, "li-stays"); err != nil {
		t.Fatal(err)
	}
	parked(0)
	for sh := range s.Shards() {
		if m, err := rdb.SMembers(ctx, s.k.ptypes(sh)).Result(); err != nil || len(m) != 0 {
			t.Fatalf("shard %d ptypes %v %v", sh, m, err)
		}
	}
	mustUnpark(t, s, typ, 0)
}

func testParkOnlyFired(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	ctx := t.Context()
	now := redisNow(t, s)
	schedule1(t, s, mk("of-wait", now.Add(time.Hour)))
	schedule1(t, s, mk("of-done", now.Add(-time.Second)))
	fired := fireAll(t, s)
	mustFinish(t, s, Finish{ID: "of-done", Gen: fired["of-done"].Gen, Kind: Succeeded})
	mustPark(t, s, []Park{
		{ID: "of-wait", Type: "order.cancel", Shard: s.Shard("of-wait")},
		{ID: "of-done", Gen: fired["of-done"].Gen, Type: "order.cancel", Shard: s.Shard("of-done")},
		{ID: "of-none", Type: "order.cancel", Shard: 0},
	}, 0)
	if g, _ := s.Get(ctx, "of-wait"); g.State != task.StateScheduled || g.Gen != 0 {
		t.Fatalf("waiting task after park: %+v", g)
	}
	if pt, _ := s.ParkedTypes(ctx); len(pt) != 0 {
		t.Fatalf("parked types %v", pt)
	}
	// a retrying task keeps its attempt through a park
	schedule1(t, s, mk("of-retry", now.Add(-time.Second)))
	f := fireAll(t, s)["of-retry"]
	mustFinish(t, s, Finish{ID: "of-retry", Gen: f.Gen, Kind: Retry, Due: now.Add(-time.Millisecond), Error: "e1"})
	f = fireAll(t, s)["of-retry"]
	mustPark(t, s, parksOf(map[string]*task.Task{"of-retry": f}, "order.cancel", "", "of-retry"), 1)
	mustUnpark(t, s, "order.cancel", 1)
	if g, _ := s.Get(ctx, "of-retry"); g.State != task.StateRetrying || g.Attempt != 2 || g.LastError != "e1" {
		t.Fatalf("retrying after unpark: %+v", g)
	}
}

func testParkAncientDue(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 1})
	ctx := t.Context()
	old := time.Unix(1, 0).UTC()
	schedule1(t, s, mk("anc", old))
	fired := fireAll(t, s)
	mustPark(t, s, parksOf(fired, "order.cancel", "", "anc"), 1)
	if got := fireAll(t, s); len(got) != 0 {
		t.Fatalf("took a parked task due in 1970: %v", got)
	}
	if g, _ := s.Get(ctx, "anc"); g.State != task.StatePaused || !g.DueAt.Equal(old) {
		t.Fatalf("get: %+v", g)
	}
	if got := walkAll(t, s, ListQuery{State: task.StatePaused, DueBefore: old.Add(time.Second)}, 5, nil); len(got) != 1 {
		t.Fatalf("paused before 1970-01-01T00:00:02: %v", listedIDs(got))
	}
	st, _ := s.Stats(ctx)
	if st[0].Overdue != 0 || st[0].EarliestDue != nil || st[0].Paused != 1 {
		t.Fatalf("stats %+v", st[0])
	}
	mustUnpark(t, s, "order.cancel", 1)
	if got := fireAll(t, s); len(got) != 1 {
		t.Fatalf("after unpark fired %v", got)
	}
}

func testParkStats(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 1})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	for i := range 10 {
		schedule1(t, s, mk(fmt.Sprintf("sp-%d", i), now.Add(-time.Minute)))
	}
	fired := fireAll(t, s)
	mustPark(t, s, parksOf(fired, "a", "", "sp-0", "sp-1", "sp-2"), 3)
	mustPark(t, s, parksOf(fired, "b", "", "sp-3"), 1)
	schedule1(t, s, mk("sp-late", now.Add(-30*time.Second)))
	schedule1(t, s, mk("sp-early", now.Add(-10*time.Minute)))
	schedule1(t, s, mk("sp-future", now.Add(time.Hour)))
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := st[0]
	if x.Overdue != 2 || x.Paused != 4 || x.Scheduled != 7 || x.EarliestDue == nil || !x.EarliestDue.Equal(now.Add(-10*time.Minute)) {
		t.Fatalf("stats %+v", x)
	}
	if x.OldestOverdueSeconds < 600 || x.OldestOverdueSeconds > 660 {
		t.Fatalf("oldest overdue %v s", x.OldestOverdueSeconds)
	}
	if pt, _ := s.ParkedTypes(ctx); pt["a"] != 3 || pt["b"] != 1 || len(pt) != 2 {
		t.Fatalf("parked types %v", pt)
	}
	// nothing overdue: no age; a parked head is no earliest due
	for _, id := range []string{"sp-late", "sp-early", "sp-future"} {
		if err := s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	st, _ = s.Stats(ctx)
	if x := st[0]; x.Overdue != 0 || x.OldestOverdueSeconds != 0 || x.EarliestDue != nil || x.Paused != 4 {
		t.Fatalf("stats with only parked tasks %+v", x)
	}
}

// A growth moves parked tasks like waiting ones: the move recomputes the
// due score from the record, so they arrive unparked, due at their time,
// and the old shard's index entries are dropped as stale.
func testParkMovedByGrowth(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 2})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("gm-%d", i))
		schedule1(t, s, mk(ids[i], now.Add(-time.Minute+time.Duration(i)*time.Millisecond)))
	}
	fired := fireAll(t, s)
	mustPark(t, s, parksOf(fired, "order.cancel", "", ids...), len(ids))
	m := grow(t, s, 8)
	moved := moveAll(t, s, m, 1)
	if moved == 0 {
		t.Fatal("nothing moved")
	}
	stayed := 0
	for _, id := range ids {
		g, err := s.Get(ctx, id)
		if err != nil || !g.DueAt.Equal(fired[id].DueAt) {
			t.Fatalf("%s after the move: %+v %v", id, g, err)
		}
		want := task.StatePaused
		if m.Shard(id) != fired[id].Shard {
			want = task.StateScheduled
		} else {
			stayed++
		}
		if g.State != want || g.Shard != m.Shard(id) {
			t.Fatalf("%s after the move: %s on %d, want %s on %d", id, g.State, g.Shard, want, m.Shard(id))
		}
	}
	if moved+stayed != len(ids) {
		t.Fatalf("moved %d, stayed %d of %d", moved, stayed, len(ids))
	}
	got := map[string]bool{}
	for sh := range m.Count {
		for _, tk := range mustTake(t, s, sh, 2).Tasks {
			got[tk.ID] = true
		}
	}
	if len(got) != moved {
		t.Fatalf("fired %d moved tasks, want %d", len(got), moved)
	}
	mustUnpark(t, s, "order.cancel", stayed)
}
