package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// kit is an item of type typ with key key, due at due (ms after base).
func kit(typ, id, key string, due int) Item {
	return Item{ID: id, Type: typ, Key: key, Due: time.UnixMilli(1_700_000_000_000 + int64(due))}
}

// admitOne admits items and fails the test on error.
func admitOne(t *testing.T, l *Limiter, batch ...Item) []Decision {
	t.Helper()
	ds, err := l.Admit(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// runs says which items ran ("a1 b1 -a2": a2 deferred).
func runs(batch []Item, ds []Decision) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(' ')
		}
		if !d.Run {
			b.WriteByte('-')
		}
		b.WriteString(batch[i].ID)
	}
	return b.String()
}

func wantRuns(t *testing.T, batch []Item, ds []Decision, want string) {
	t.Helper()
	if got := runs(batch, ds); got != want {
		t.Fatalf("ran %q, want %q (decisions %+v)", got, want, ds)
	}
}

// valueKeys counts the Redis keys of typ's limits in ns (SCAN MATCH).
func valueKeys(t *testing.T, rdb redis.UniversalClient, ns, typ string) []string {
	t.Helper()
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, "dq:{"+ns+":rl:"+typ+"}:*", 1000).Iterator()
		for it.Next(ctx) {
			out = append(out, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		err = scan(t.Context(), c)
	case *redis.ClusterClient:
		err = c.ForEachMaster(t.Context(), scan)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Two values never share slots; one value's limit holds; tasks without a
// key are limited by their id (each its own value).
func TestKeyedConcurrency(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	rules := StaticRules{
		"one": {Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}},
		"two": {Scope: "key", Unordered: true, Concurrency: &Concurrency{Limit: 2, SlotTTL: dur(time.Minute)}},
	}
	l := newLimiter(t, rdb, testNS(t), rules, Options{ConcurrencyRetry: 50 * time.Millisecond})
	batch := []Item{kit("one", "a1", "a", 1), kit("one", "b1", "b", 2), kit("one", "a2", "a", 3),
		kit("one", "n1", "", 4), kit("one", "n2", "", 5)}
	ds := admitOne(t, l, batch...)
	wantRuns(t, batch, ds, "a1 b1 -a2 n1 n2")
	a2 := batch[2]
	if ds[2].Reason != ReasonConcurrency {
		t.Fatalf("a2 deferred for %q, want concurrency", ds[2].Reason)
	}
	base := keyedBase(l.ns, "one")
	// a limit of 1: the value is the slot, its expiry the holder's claim
	if ds[0].Slot() != "a" || ds[1].Slot() != "b" || ds[0].runKey != base+"k1" {
		t.Fatalf("slots %+v %+v: want each value in the type's limit-1 set", ds[0], ds[1])
	}
	if exp, err := rdb.ZScore(ctx, base+"k1", "a").Result(); err != nil || int64(exp) != ds[0].one.exp.Load() {
		t.Fatalf("a's slot expires at %v (%v), want the holder's claim %d", exp, err, ds[0].one.exp.Load())
	}
	// a limit of 2 per value, unordered: the third of a value waits
	base2 := keyedBase(l.ns, "two")
	batch = []Item{kit("two", "x1", "x", 1), kit("two", "x2", "x", 2), kit("two", "x3", "x", 3), kit("two", "y1", "y", 4)}
	ds2 := admitOne(t, l, batch...)
	wantRuns(t, batch, ds2, "x1 x2 -x3 y1")
	// a higher limit: a slot id per task, ending with its value, and a
	// count per value
	if n, err := rdb.ZScore(ctx, base2+"ks", "#x").Result(); err != nil || n != -2 {
		t.Fatalf("x's count is %v (%v), want -2: two slots held", n, err)
	}
	if _, err := rdb.ZScore(ctx, base2+"ks", ds2[0].Slot()).Result(); err != nil || !strings.HasSuffix(ds2[0].Slot(), ":x") || ds2[0].runKey != base2+"ks" {
		t.Fatalf("x1's slot %q in %s: %v, want it in the slot set, ending with its value", ds2[0].Slot(), ds2[0].runKey, err)
	}
	if err := l.Done(ctx, batch[0], ds2[0]); err != nil {
		t.Fatal(err)
	}
	wantRuns(t, batch[2:3], admitOne(t, l, batch[2]), "x3")
	// a refresh renews the value's slot; Done frees it
	if ok, err := l.Refresh(ctx, Item{Type: "one"}, ds[0]); err != nil || !ok {
		t.Fatalf("refresh: %v %v", ok, err)
	}
	if err := l.Done(ctx, Item{Type: "one"}, ds[0]); err != nil {
		t.Fatal(err)
	}
	// Done queues the release (release.go): it reaches Redis within
	// releaseDelay, with no Admit to carry it
	testenv.WaitFor(t, 5*time.Second, "a's slot freed after Done", func() bool {
		return errors.Is(rdb.ZScore(ctx, ds[0].runKey, ds[0].Slot()).Err(), redis.Nil)
	})
	// a's next task runs once a2 (which heads its queue) ran
	a2.Due = ds[2].NotBefore
	wantRuns(t, []Item{kit("one", "a3", "a", 9), a2}, admitOne(t, l, kit("one", "a3", "a", 9), a2), "-a3 a2")
}

// A header scope limits by the header's value; tasks without the header
// share the empty value.
func TestKeyedHeaderScope(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	rules := StaticRules{"h": {Scope: "header:tenant", Unordered: true, Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{})
	with := func(id, tenant string) Item {
		it := Item{ID: id, Type: "h", Key: id}
		if tenant != "" {
			it.Headers = map[string]string{"tenant": tenant, "other": id}
		}
		return it
	}
	batch := []Item{with("1", "acme"), with("2", "globex"), with("3", "acme"), with("4", ""), with("5", "")}
	wantRuns(t, batch, admitOne(t, l, batch...), "1 2 -3 4 -5")
}

// A window quota and a token bucket apply per value, each from full.
func TestKeyedQuotaAndBucket(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	q := &WindowQuota{Limit: 2, Window: dur(time.Hour)}
	b := &TokenBucket{Rate: 1, Burst: 2, Reserve: 1, MinPriority: 5}
	rules := StaticRules{
		"q": {Scope: "key", WindowQuota: q},
		"b": {Scope: "key", Unordered: true, TokenBucket: b},
	}
	l := newLimiter(t, rdb, testNS(t), rules, Options{})
	shift := alignShift(t, rdb, time.Hour, l)
	w := time.Hour.Milliseconds()
	windowEnd := (redisMillis(t, rdb)+shift)/w*w + w

	batch := []Item{kit("q", "a1", "a", 1), kit("q", "a2", "a", 2), kit("q", "a3", "a", 3), kit("q", "b1", "b", 4), kit("q", "b2", "b", 5)}
	ds := admitOne(t, l, batch...)
	wantRuns(t, batch, ds, "a1 a2 -a3 b1 b2")
	if ds[2].Reason != ReasonWindowQuota || ds[2].NotBefore.UnixMilli() != windowEnd {
		t.Fatalf("a3: %+v, want window_quota until %d", ds[2], windowEnd)
	}
	u, err := l.Usage(ctx, "q", rules["q"])
	if err != nil || u.ActiveKeys != 2 || u.WindowCount != 4 || len(u.Keys) != 2 || u.Keys[0].Waiting != 1 {
		t.Fatalf("quota usage %+v %v, want 2 values, 4 admitted, a3 waiting", u, err)
	}
	// the next window starts every value from zero
	shiftOf(t, l).Add(w)
	wantRuns(t, batch[2:3], admitOne(t, l, batch[2]), "a3")

	// bucket: 2 tokens per value, the last one kept for priority >= 5
	hi := func(id, key string) Item { it := kit("b", id, key, 0); it.Priority = 5; return it }
	batch = []Item{kit("b", "a1", "a", 1), kit("b", "a2", "a", 2), hi("a3", "a"), hi("a4", "a"), kit("b", "c1", "c", 1)}
	ds = admitOne(t, l, batch...)
	// unordered: priority first; the low ones find only the reserve left
	wantRuns(t, batch, ds, "-a1 -a2 a3 a4 c1")
	now := redisMillis(t, rdb) + shiftOf(t, l).Load()
	for _, i := range []int{0, 1} {
		if ds[i].Reason != ReasonTokenBucket {
			t.Fatalf("%s: %+v, want token_bucket", batch[i].ID, ds[i])
		}
		if wait := ds[i].NotBefore.UnixMilli() - now; wait < 500 || wait > 3100 {
			t.Fatalf("%s waits %d ms, want about one to two tokens at 1/s", batch[i].ID, wait)
		}
	}
}

// FIFO per value: a deferred task is not overtaken by a later one of its
// value, even when the slot is free when the later one arrives.
func TestKeyedFIFO(t *testing.T) {
	srv := testenv.StartRedis(t)
	ns := testNS(t)
	rules := StaticRules{"o": {Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}}
	w1 := newLimiter(t, srv.Client(t), ns, rules, Options{ConcurrencyRetry: 100 * time.Millisecond})
	w2 := newLimiter(t, srv.Client(t), ns, rules, Options{ConcurrencyRetry: 100 * time.Millisecond})
	ctx := t.Context()
	x, a, b := kit("o", "x", "k", 0), kit("o", "a", "k", 10), kit("o", "b", "k", 20)
	dx := admitOne(t, w1, x)
	wantRuns(t, []Item{x}, dx, "x")
	da := admitOne(t, w2, a)
	if da[0].Run || da[0].Reason != ReasonConcurrency {
		t.Fatalf("a: %+v, want deferred for concurrency", da[0])
	}
	if err := w1.Done(ctx, x, dx[0]); err != nil {
		t.Fatal(err)
	}
	// the slot is free, but a waits: b must not overtake it
	db := admitOne(t, w1, b)
	if db[0].Run || db[0].Reason != ReasonOrder {
		t.Fatalf("b: %+v, want deferred for order", db[0])
	}
	if !db[0].NotBefore.After(da[0].NotBefore) {
		t.Fatalf("b due again at %v, not after a's expected return %v", db[0].NotBefore, da[0].NotBefore)
	}
	// b and a come back in one batch, b first in fetch order: a runs
	a.Due = da[0].NotBefore // its due as the deferral rewrote it
	batch := []Item{b, a}
	ds := admitOne(t, w2, batch...)
	wantRuns(t, batch, ds, "-b a")
	if ds[0].Reason != ReasonConcurrency {
		t.Fatalf("b: %+v, want concurrency now that it heads the queue", ds[0])
	}
	if err := w2.Done(ctx, a, ds[1]); err != nil {
		t.Fatal(err)
	}
	// the other worker sees the slot free once w2 sent the release
	if err := w2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// a later c still waits behind b; b runs when back
	c := kit("o", "c", "k", 30)
	batch = []Item{c, b}
	wantRuns(t, batch, admitOne(t, w1, batch...), "-c b")
}

// A task that goes to retry keeps its place: later tasks of its value
// wait behind it until it is back; Hold costs nothing for other types.
func TestKeyedHoldOnRetry(t *testing.T) {
	hook := new(countHook)
	rdb := testenv.StartRedis(t).Client(t)
	rdb.AddHook(hook)
	ctx := t.Context()
	rules := StaticRules{
		"o": {Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}},
		"u": {Scope: "key", Unordered: true, Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}},
		"t": {Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}},
	}
	l := newLimiter(t, rdb, testNS(t), rules, Options{})
	a, b := kit("o", "a", "k", 0), kit("o", "b", "k", 10)
	da := admitOne(t, l, a)
	until := time.Now().Add(2 * time.Second)
	if err := l.Hold(ctx, a, until); err != nil {
		t.Fatal(err)
	}
	if err := l.Done(ctx, a, da[0]); err != nil {
		t.Fatal(err)
	}
	db := admitOne(t, l, b)
	if db[0].Run || db[0].Reason != ReasonOrder || db[0].NotBefore.Before(until.Truncate(time.Millisecond)) {
		t.Fatalf("b: %+v, want deferred for order until after %v", db[0], until)
	}
	a.Due = until
	batch := []Item{b, a}
	wantRuns(t, batch, admitOne(t, l, batch...), "-b a")

	before := hook.roundTrips()
	for _, typ := range []string{"u", "t", "none"} {
		if err := l.Hold(ctx, Item{ID: "z", Type: typ}, until); err != nil {
			t.Fatal(err)
		}
	}
	if rt := hook.roundTrips() - before; rt != 0 {
		t.Fatalf("Hold of types without an ordered keyed rule cost %d round trips", rt)
	}
}

// A head that does not come back is dropped grace after its expected
// return: its value does not block forever.
func TestKeyedStaleHeadDropped(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	rules := StaticRules{"o": {Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{ConcurrencyRetry: 50 * time.Millisecond, OrderGrace: 500 * time.Millisecond})
	x, lost, b := kit("o", "x", "k", 0), kit("o", "lost", "k", 10), kit("o", "b", "k", 20)
	dx := admitOne(t, l, x)
	if d := admitOne(t, l, lost); d[0].Run {
		t.Fatal("lost ran while x holds the slot")
	}
	if err := l.Done(ctx, x, dx[0]); err != nil {
		t.Fatal(err)
	}
	// lost never comes back (cancelled): b waits, then passes
	start := time.Now()
	var waited time.Duration
	testenv.WaitFor(t, 5*time.Second, "b to pass the lost head", func() bool {
		d := admitOne(t, l, b)
		if d[0].Run {
			waited = time.Since(start)
			return true
		}
		if d[0].Reason != ReasonOrder {
			t.Fatalf("b deferred for %q, want order", d[0].Reason)
		}
		return false
	})
	t.Logf("b passed the lost head after %v (expected return ~50ms + grace 500ms)", waited.Round(time.Millisecond))
	if waited < 450*time.Millisecond {
		t.Fatalf("b passed after %v, before the grace", waited)
	}
}

// Per-value state returns to zero once the values go idle.
func TestKeyedIdleStateGoesToZero(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ns := "idle" + fmt.Sprint(nsSeq.Add(1))
	rules := StaticRules{"z": {
		Scope:       "key",
		WindowQuota: &WindowQuota{Limit: 100, Window: dur(200 * time.Millisecond)},
		TokenBucket: &TokenBucket{Rate: 100, Burst: 10},
		Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Second)},
	}}
	l := newLimiter(t, rdb, ns, rules, Options{ConcurrencyRetry: 50 * time.Millisecond, OrderGrace: 300 * time.Millisecond})
	l.minIdle = 500 * time.Millisecond
	var batch []Item
	for i := range 50 {
		for j := range 2 { // the second of each value is deferred and queued
			batch = append(batch, kit("z", fmt.Sprintf("v%d-%d", i, j), fmt.Sprintf("v%d", i), j))
		}
	}
	ds := admitOne(t, l, batch...)
	if n := countRun(ds); n != 50 {
		t.Fatalf("admitted %d, want 50", n)
	}
	for i := 0; i < len(batch); i += 4 { // some finish, others crash holding their slot
		if err := l.Done(t.Context(), batch[i], ds[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Hold(t.Context(), kit("z", "r", "retried", 0), time.Now().Add(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	keys := valueKeys(t, rdb, ns, "z")
	t.Logf("%d keys while active", len(keys))
	if len(keys) < 50 { // a queue (2 keys) for each of 50 values, the type's keys
		t.Fatalf("only %d keys while active", len(keys))
	}
	// slot TTL 1s (the crashed holders'), queues 300ms past their
	// expected return, the index 500ms past its latest value
	idle := time.Now()
	testenv.WaitFor(t, 5*time.Second, "per-value state to expire", func() bool {
		return len(valueKeys(t, rdb, ns, "z")) == 0
	})
	t.Logf("no key left %v after the last activity", time.Since(idle).Round(10*time.Millisecond))
}

// Usage lists the busiest values first, bounded, with the sums.
func TestKeyedUsage(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	rule := Rule{Scope: "header:tenant", Concurrency: &Concurrency{Limit: 20, SlotTTL: dur(time.Minute)},
		WindowQuota: &WindowQuota{Limit: 1000, Window: dur(time.Hour)}}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"u": rule}, Options{})
	var batch []Item
	for v := range 12 { // tenant v holds v+1 slots
		for k := range v + 1 {
			batch = append(batch, Item{ID: fmt.Sprintf("%d-%d", v, k), Type: "u", Headers: map[string]string{"tenant": fmt.Sprintf("t%02d", v)}})
		}
	}
	if n := countRun(admitOne(t, l, batch...)); n != len(batch) {
		t.Fatalf("admitted %d of %d", n, len(batch))
	}
	u, err := l.Usage(ctx, "u", rule)
	if err != nil {
		t.Fatal(err)
	}
	if u.ActiveKeys != 12 || u.Running != int64(len(batch)) || u.WindowCount != int64(len(batch)) || len(u.Keys) != 10 {
		t.Fatalf("usage %+v, want 12 values, %d running, 10 listed", u, len(batch))
	}
	for i, k := range u.Keys {
		if want := fmt.Sprintf("t%02d", 11-i); k.Key != want || k.Running != int64(12-i) || k.WindowCount != int64(12-i) {
			t.Fatalf("row %d %+v, want %s with %d", i, k, want, 12-i)
		}
	}
	// a limit of 1 (its holders in :k1), with waiting tasks
	one := Rule{Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}
	l1 := newLimiter(t, rdb, testNS(t), StaticRules{"o": one}, Options{})
	batch = []Item{kit("o", "a1", "a", 1), kit("o", "a2", "a", 2), kit("o", "b1", "b", 1)}
	wantRuns(t, batch, admitOne(t, l1, batch...), "a1 -a2 b1")
	if u, err = l1.Usage(ctx, "o", one); err != nil {
		t.Fatal(err)
	}
	if u.ActiveKeys != 2 || u.Running != 2 || len(u.Keys) != 2 || u.Keys[0].Key != "a" || u.Keys[0].Running != 1 || u.Keys[0].Waiting != 1 ||
		u.Keys[1].Key != "b" || u.Keys[1].Running != 1 {
		t.Fatalf("usage %+v, want a (running 1, waiting 1) then b (running 1)", u)
	}
}

// One admit call per type on a Redis Cluster: all of a type's values
// live in the type's slot.
func TestKeyedRedisCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t).Client(t)
	hook := new(countHook)
	cl.AddHook(hook)
	ns := testNS(t)
	rule := Rule{Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)},
		TokenBucket: &TokenBucket{Rate: 10, Burst: 100}}
	rules := StaticRules{"alpha": rule, "beta": rule}
	l := newLimiter(t, cl, ns, rules, Options{})
	var batch []Item
	for i := range 100 {
		batch = append(batch, kit("alpha", fmt.Sprint("a", i), fmt.Sprint("k", i%50), i), kit("beta", fmt.Sprint("b", i), fmt.Sprint("k", i), i))
	}
	if _, err := l.Admit(t.Context(), batch[:2]); err != nil { // loads the scripts
		t.Fatal(err)
	}
	before := hook.roundTrips()
	ds := admitOne(t, l, batch...)
	if rt := hook.roundTrips() - before; rt != 1 {
		t.Fatalf("two keyed types cost %d round trips, want 1 pipeline", rt)
	}
	if n := countRun(ds); n != 148 { // the first of 49 values of alpha and of 99 of beta (k0 of both is held)
		t.Fatalf("admitted %d, want 148", n)
	}
	for _, typ := range []string{"alpha", "beta"} {
		slots := map[int64]bool{}
		keys := valueKeys(t, cl, ns, typ)
		for _, k := range keys {
			slots[cl.ClusterKeySlot(t.Context(), k).Val()] = true
		}
		if len(keys) < 5 || len(slots) != 1 {
			t.Fatalf("%s: %d keys in %d slots, want all in one", typ, len(keys), len(slots))
		}
	}
	u, err := l.UsageOf(t.Context(), rules)
	if err != nil || u["beta"].ActiveKeys != 100 || u["beta"].Running != 100 {
		t.Fatalf("usage %+v %v", u, err)
	}
}

// Rules with a scope are validated; errors name the field.
func TestKeyedRuleValidation(t *testing.T) {
	good := []string{
		`{"scope":"type","concurrency":{"limit":1}}`,
		`{"scope":"key","concurrency":{"limit":1}}`,
		`{"scope":"key","unordered":true,"concurrency":{"limit":1}}`,
		`{"scope":"header:tenant","window_quota":{"limit":1,"window":"1s"}}`,
		`{"scope":"header:` + strings.Repeat("x", 256) + `","concurrency":{"limit":1}}`,
	}
	for _, body := range good {
		r, err := DecodeRule(strings.NewReader(body), 0)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if !strings.Contains(body, `"scope":"`+r.Scope+`"`) {
			t.Fatalf("%s: scope read back as %q", body, r.Scope)
		}
	}
	bad := map[string]string{
		`{"scope":"tenant","concurrency":{"limit":1}}`:                                  "scope",
		`{"scope":"Key","concurrency":{"limit":1}}`:                                     "scope",
		`{"scope":"header:","concurrency":{"limit":1}}`:                                 "scope",
		`{"scope":"header:dq-shard","concurrency":{"limit":1}}`:                         "scope",
		`{"scope":"header:DQ-x","concurrency":{"limit":1}}`:                             "scope",
		`{"scope":"header:a b","concurrency":{"limit":1}}`:                              "scope",
		`{"scope":"header:` + strings.Repeat("x", 257) + `","concurrency":{"limit":1}}`: "scope",
		`{"unordered":true,"concurrency":{"limit":1}}`:                                  "unordered",
		`{"scope":"type","unordered":true,"concurrency":{"limit":1}}`:                   "unordered",
		`{"scope":1,"concurrency":{"limit":1}}`:                                         "scope",
	}
	for body, field := range bad {
		_, err := DecodeRule(strings.NewReader(body), 0)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ErrInvalidRule) {
			t.Fatalf("%.60s: %v, want a FieldError on %q", body, err, field)
		}
	}
	// a rule stored before scopes existed reads back as the type scope
	r, err := decodeRule([]byte(`{"concurrency":{"limit":1,"slot_ttl":"1s"}}`), Rule.validateStored)
	if err != nil || r.keyed() {
		t.Fatalf("old rule: %+v %v", r, err)
	}
}

// Done's releases ride with the next Admit of the Limiter (release.go): an
// Admit right after a Done finds the slot free, in the same round trip,
// and a slot released twice by mistake, or by a Limiter whose Admit never
// comes, is freed by the timer.
func TestReleaseRidesWithAdmit(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	l := newLimiter(t, rdb, "rel", StaticRules{"t": Rule{Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}},
		"k": Rule{Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}}, Options{})
	for _, typ := range []string{"t", "k"} {
		it := Item{ID: "a", Type: typ, Key: "x"}
		for round := range 50 {
			ds, err := l.Admit(ctx, []Item{it})
			if err != nil || !ds[0].Run {
				t.Fatalf("%s round %d: the slot Done freed is still held: %+v %v", typ, round, ds, err)
			}
			if held, err := l.Refresh(ctx, it, ds[0]); err != nil || !held {
				t.Fatalf("%s: refresh of a held slot: %v %v", typ, held, err)
			}
			if err := l.Done(ctx, it, ds[0]); err != nil {
				t.Fatal(err)
			}
			if held, err := l.Refresh(ctx, it, ds[0]); err != nil || held {
				t.Fatalf("%s: refresh after Done reports the slot held: %v %v", typ, held, err)
			}
		}
	}
	ds, err := l.Admit(ctx, []Item{{ID: "b", Type: "t"}})
	if err != nil || !ds[0].Run {
		t.Fatalf("b: %+v %v", ds, err)
	}
	_ = l.Done(ctx, Item{ID: "b", Type: "t"}, ds[0])
	testenv.WaitFor(t, 5*time.Second, "the timer's release", func() bool {
		n, err := rdb.ZCount(ctx, typeKeys(l.ns, "t")[keyRunning], "(0", "+inf").Result() // slots, not the pad
		return err == nil && n == 0
	})
}

// A slot whose holder crashed expires and frees its value: the expired
// slot leaves the value's count whichever call finds it first (the next
// admission's prune, or the holder's late refresh), exactly once, and a
// value holding nothing has no count left.
func TestKeyedExpiredSlotFreesItsValue(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	rules := StaticRules{"e": {Scope: "key", Concurrency: &Concurrency{Limit: 2, SlotTTL: dur(time.Second)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{ConcurrencyRetry: 50 * time.Millisecond})
	base := keyedBase(l.ns, "e")
	count := func() float64 {
		n, err := rdb.ZScore(ctx, base+"ks", "#a").Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return -n
	}
	batch := []Item{kit("e", "a1", "a", 1), kit("e", "a2", "a", 2), kit("e", "a3", "a", 3)}
	ds := admitOne(t, l, batch...)
	wantRuns(t, batch, ds, "a1 a2 -a3")
	if c := count(); c != 2 {
		t.Fatalf("count %v, want 2", c)
	}
	// both holders "crashed": no renewal. b's task, taken in between,
	// keeps the slot set (its TTL is the last slot's), so a's expired
	// slots are still in it
	time.Sleep(600 * time.Millisecond)
	b := kit("e", "b1", "b", 1)
	wantRuns(t, []Item{b}, admitOne(t, l, b), "b1")
	time.Sleep(500 * time.Millisecond)
	// a1's holder wakes up late: its refresh finds the slot expired and
	// drops it (count 1); the next admission prunes a2's (count 0)
	if held, err := l.Refresh(ctx, batch[0], ds[0]); err != nil || held {
		t.Fatalf("late refresh: held %v (%v), want lost", held, err)
	}
	if c := count(); c != 1 {
		t.Fatalf("count %v after the late refresh, want 1", c)
	}
	next := []Item{kit("e", "a3", "a", 3), kit("e", "a4", "a", 4), kit("e", "a5", "a", 5)}
	ds2 := admitOne(t, l, next...)
	wantRuns(t, next, ds2, "a3 a4 -a5")
	if c := count(); c != 2 {
		t.Fatalf("count %v after the expired slots left, want 2 (a3, a4)", c)
	}
	// the crashed holders' late Done changes nothing; a3's and a4's free
	// the value, and its count goes
	release := func(items []Item, ds []Decision) {
		for i, it := range items {
			_ = l.Done(ctx, it, ds[i])
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	release(batch[:2], ds)
	if c := count(); c != 2 {
		t.Fatalf("count %v after late releases of expired slots, want 2", c)
	}
	release(next[:2], ds2)
	if n, err := rdb.ZCard(ctx, base+"ks").Result(); err != nil || n != 2 {
		t.Fatalf("the slot set holds %d members (%v) with only b's slot held, want 2 (the slot, b's count)", n, err)
	}
}

// limitOne starts a redis-server and a Limiter whose type typ has an
// ordered key-scoped concurrency rule of limit 1 with slots of ttl, and
// returns them with the type's holder set (:k1).
func limitOne(t *testing.T, typ string, ttl time.Duration) (*redis.Client, *Limiter, string) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	rules := StaticRules{typ: {Scope: "key", Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(ttl)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{ConcurrencyRetry: 50 * time.Millisecond})
	return rdb, l, keyedBase(l.ns, typ) + "k1"
}

// With a limit of 1 a slot is its value; the holder's claim (its expiry
// as it set it last) keeps a holder whose slot expired from freeing or
// renewing the next holder's.
func TestKeyedLimitOneClaim(t *testing.T) {
	rdb, l, k1 := limitOne(t, "c", time.Second)
	ctx := t.Context()
	a1, a2 := kit("c", "a1", "a", 1), kit("c", "a2", "a", 2)
	d1 := admitOne(t, l, a1)[0]
	if !d1.Run {
		t.Fatalf("a1 deferred: %+v", d1)
	}
	// a renewal moves the claim, through any copy of the decision
	first := d1.one.exp.Load()
	time.Sleep(5 * time.Millisecond)
	copyOf := d1
	if held, err := l.Refresh(ctx, a1, copyOf); err != nil || !held {
		t.Fatalf("refresh: %v %v", held, err)
	}
	if d1.one.exp.Load() <= first {
		t.Fatalf("claim %d after a renewal, want later than %d", d1.one.exp.Load(), first)
	}
	if exp, _ := rdb.ZScore(ctx, k1, "a").Result(); int64(exp) != d1.one.exp.Load() {
		t.Fatalf("slot expires at %v, want the renewed claim %d", exp, d1.one.exp.Load())
	}
	// a1's holder stalls past its slot's expiry; a2 takes the value
	time.Sleep(1100 * time.Millisecond)
	d2 := admitOne(t, l, a2)[0]
	if !d2.Run {
		t.Fatalf("a2 deferred after a1's slot expired: %+v", d2)
	}
	// a1's late renewal and release leave a2's slot alone
	if held, err := l.Refresh(ctx, a1, d1); err != nil || held {
		t.Fatalf("late refresh of an expired claim: held %v (%v), want lost", held, err)
	}
	_ = l.Done(ctx, a1, d1)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if exp, err := rdb.ZScore(ctx, k1, "a").Result(); err != nil || int64(exp) != d2.one.exp.Load() {
		t.Fatalf("a2's slot: %v (%v), want held with its claim %d", exp, err, d2.one.exp.Load())
	}
	a3 := kit("c", "a3", "a", 3)
	if d := admitOne(t, l, a3)[0]; d.Run {
		t.Fatalf("a3 ran while a2 holds the value")
	}
	// a2's release frees it; the set holds no value after its last
	// holder, and is gone within a slot TTL (its pad, common.lua, stays
	// until then after a release by ZREM)
	_ = l.Done(ctx, a2, d2)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.ZCount(ctx, k1, "(0", "+inf").Result(); err != nil || n != 0 {
		t.Fatalf("the limit-1 set holds %d values (%v) with no slot held", n, err)
	}
	if enc, err := rdb.ObjectEncoding(ctx, k1).Result(); err == nil && enc != "skiplist" {
		t.Fatalf("the limit-1 set is a %s, want a skiplist (skiplist_pad)", enc)
	}
	if ttl, err := rdb.PTTL(ctx, k1).Result(); err != nil || ttl > time.Second {
		t.Fatalf("the limit-1 set with no slot held expires in %v (%v), want within the slot TTL (1s)", ttl, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for rdb.Exists(ctx, k1).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the limit-1 set still exists 3s after its last holder left")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A rule whose limit changes live between 1 and more keeps counting the
// holders of both slot sets.
func TestKeyedLimitChangeKeepsHolders(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	rules := StaticRules{"c": {Scope: "key", Unordered: true, Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{})
	one := []Item{kit("c", "a1", "a", 1)}
	wantRuns(t, one, admitOne(t, l, one...), "a1") // in :k1
	rules["c"] = Rule{Scope: "key", Unordered: true, Concurrency: &Concurrency{Limit: 3, SlotTTL: dur(time.Minute)}}
	more := []Item{kit("c", "a2", "a", 2), kit("c", "a3", "a", 3), kit("c", "a4", "a", 4)}
	wantRuns(t, more, admitOne(t, l, more...), "a2 a3 -a4") // in :ks, a1 counted
	rules["c"] = Rule{Scope: "key", Unordered: true, Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(time.Minute)}}
	b := []Item{kit("c", "a5", "a", 5), kit("c", "b1", "b", 1)}
	wantRuns(t, b, admitOne(t, l, b...), "-a5 b1") // three of a hold slots
}

// A limit-1 release goes as a plain ZREM only while fresh; one put back
// after a failure never is.
func TestOneReleaseFreshness(t *testing.T) {
	es := []relEntry{{"a", 100, 50}, {"b", 200, 10}, {"c", 300, 0}}
	fresh, vals, claims := oneArgs(es, 20)
	if fmt.Sprint(fresh, vals, claims) != "[a] [b c] [200 300]" {
		t.Fatalf("at 20: fresh %v, checked %v %v", fresh, vals, claims)
	}
	var r releases
	q := relQueue{args: map[string][]relEntry{"k": es}, kinds: map[string]relKind{"k": relOne}}
	failedCmd := redis.NewIntCmd(t.Context())
	failedCmd.SetErr(errors.New("boom"))
	r.putBack(q, map[string][]redis.Cmder{"k": {failedCmd}})
	fresh, vals, _ = oneArgs(r.take().args["k"], 0)
	if len(fresh) != 0 || len(vals) != 3 {
		t.Fatalf("put back: fresh %v, checked %v", fresh, vals)
	}
}

// A batch of one task per value under a limit of 1 alone (admitkeyed.lua's
// short path): a value that holds its slot, or whose queue holds a task
// deferred before, still holds its task back; a first batch creates the
// holder set with its pad, a later one adds to it.
func TestKeyedOnePerValueBatch(t *testing.T) {
	rdb, l, k1 := limitOne(t, "o", time.Minute)
	ctx := t.Context()
	first := []Item{kit("o", "a1", "a", 1), kit("o", "b1", "b", 2)}
	ds := admitOne(t, l, first...)
	wantRuns(t, first, ds, "a1 b1")
	if n, err := rdb.ZCard(ctx, k1).Result(); err != nil || n != 3 {
		t.Fatalf("holder set has %d members (%v), want a, b and the pad", n, err)
	}
	// a holds its slot: its next task waits, in a's queue (an id with the
	// separators of the script's task list is kept whole)
	second := []Item{kit("o", "a2 :1 x", "a", 3), kit("o", "c1", "c", 4)}
	ds2 := admitOne(t, l, second...)
	wantRuns(t, second, ds2, "-a2 :1 x c1")
	if ds2[0].Reason != ReasonConcurrency {
		t.Fatalf("a2 deferred for %q, want concurrency", ds2[0].Reason)
	}
	if err := l.Done(ctx, first[0], ds[0]); err != nil {
		t.Fatal(err)
	}
	// a is free now, but a2 heads its queue: a3 alone waits behind it
	third := []Item{kit("o", "a3", "a", 5), kit("o", "d1", "d", 6)}
	ds3 := admitOne(t, l, third...)
	wantRuns(t, third, ds3, "-a3 d1")
	if ds3[0].Reason != ReasonOrder {
		t.Fatalf("a3 deferred for %q, want order", ds3[0].Reason)
	}
	a2 := second[0]
	a2.Due = ds2[0].NotBefore
	wantRuns(t, []Item{a2}, admitOne(t, l, a2), "a2 :1 x")
}
