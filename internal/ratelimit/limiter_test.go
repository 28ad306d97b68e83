package ratelimit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// A window quota admits what is left of it, batch after batch; only the
// admitted part counts; the rest may pass when the next window starts,
// which begins from zero; the window key expires with its window.
func TestAdmitWindowPartial(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	q := WindowQuota{Limit: 10, Window: dur(time.Hour)}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"mail": {WindowQuota: &q}}, Options{})
	alignShift(t, rdb, time.Hour, l)
	w := time.Hour.Milliseconds()
	start := (redisMillis(t, rdb) + shiftOf(t, l).Load()) / w * w // the window start the shift aligned to

	steps := []struct{ n, want int }{{7, 7}, {7, 3}, {1, 0}}
	for _, s := range steps {
		ds, err := l.Admit(ctx, items("mail", s.n, 0))
		if err != nil {
			t.Fatal(err)
		}
		if got := countRun(ds); got != s.want {
			t.Fatalf("Admit of %d admitted %d, want %d", s.n, got, s.want)
		}
		for _, d := range ds {
			if !d.Run && (d.Reason != ReasonWindowQuota || d.NotBefore.UnixMilli() != start+w) {
				t.Fatalf("deferred %+v, want window_quota until the next window %d", d, start+w)
			}
		}
	}
	u, err := l.Usage(ctx, "mail", Rule{WindowQuota: &q})
	if err != nil || u.WindowCount != 10 {
		t.Fatalf("usage %+v %v, want window_count 10 (only the admitted part counts)", u, err)
	}
	// the next window starts from zero
	shiftOf(t, l).Add(time.Hour.Milliseconds())
	if ds, err := l.Admit(ctx, items("mail", 4, 0)); err != nil || countRun(ds) != 4 {
		t.Fatalf("next window admitted %d %v, want 4", countRun(ds), err)
	}
	ttl := rdb.PTTL(ctx, typeKeys(l.ns, "mail")[keyWindow]).Val()
	if ttl <= 0 || ttl > time.Hour {
		t.Fatalf("window key TTL %v: must expire with its window", ttl)
	}
}

// A batch straddling the quota runs exactly the allowed part (its highest
// priorities); an unlimited neighbour in the same batch is unaffected; the
// round trips are counted.
func TestAdmitPartialBatch(t *testing.T) {
	hook := new(countHook)
	rdb := testenv.StartRedis(t).Client(t)
	rdb.AddHook(hook)
	ctx := t.Context()
	rules := StaticRules{
		"limited": {WindowQuota: &WindowQuota{Limit: 10, Window: dur(time.Hour)}},
		"other":   {WindowQuota: &WindowQuota{Limit: 3, Window: dur(time.Hour)}},
	}
	l := newLimiter(t, rdb, testNS(t), rules, Options{})
	alignShift(t, rdb, time.Hour, l)
	w := time.Hour.Milliseconds()
	windowEnd := (redisMillis(t, rdb)+shiftOf(t, l).Load())/w*w + w

	var batch []Item
	for i := range 15 {
		batch = append(batch, Item{ID: "l" + string(rune('a'+i)), Type: "limited", Priority: i % 5})
		batch = append(batch, Item{ID: "free" + string(rune('a'+i)), Type: "unlimited"})
	}
	// Count the steady state: the first run of a script after a (re)start
	// costs EVALSHA, NOSCRIPT, EVAL, and a new connection sends HELLO.
	if err := admitScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	before := hook.roundTrips()
	ds, err := l.Admit(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if rt := hook.roundTrips() - before; rt != 1 {
		t.Fatalf("one limited type cost %d round trips, want 1", rt)
	}
	var ran, deferred []int
	for i, d := range ds {
		it := batch[i]
		if it.Type == "unlimited" {
			if !d.Run {
				t.Fatalf("unlimited %s deferred: %+v", it.ID, d)
			}
			continue
		}
		if d.Run {
			ran = append(ran, it.Priority)
			continue
		}
		deferred = append(deferred, it.Priority)
		if d.Reason != ReasonWindowQuota || d.NotBefore.UnixMilli() != windowEnd {
			t.Fatalf("deferred %s: %+v, want window_quota until %d", it.ID, d, windowEnd)
		}
	}
	if len(ran) != 10 || len(deferred) != 5 {
		t.Fatalf("ran %d deferred %d, want 10 and 5", len(ran), len(deferred))
	}
	if slices.Max(deferred) > slices.Min(ran) {
		t.Fatalf("a lower priority ran while a higher one was deferred: ran %v deferred %v", ran, deferred)
	}

	// all over: everything deferred; unlimited types cost no round trip
	ds, err = l.Admit(ctx, items("limited", 4, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Run {
			t.Fatal("admitted over the quota")
		}
	}
	before = hook.roundTrips()
	ds, err = l.Admit(ctx, append(items("unlimited", 50, 0), items("also-free", 50, 9)...))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if !d.Run {
			t.Fatal("unlimited type deferred")
		}
	}
	if rt := hook.roundTrips() - before; rt != 0 {
		t.Fatalf("a batch of unlimited types made %d Redis calls, want 0", rt)
	}

	// two limited types in one batch: still one round trip (pipelined)
	before = hook.roundTrips()
	ds, err = l.Admit(ctx, append(items("other", 5, 0), items("limited", 2, 0)...))
	if err != nil {
		t.Fatal(err)
	}
	if rt := hook.roundTrips() - before; rt != 1 {
		t.Fatalf("two limited types cost %d round trips, want 1", rt)
	}
	if n := countRun(ds); n != 3 {
		t.Fatalf("admitted %d, want 3 (other's quota; limited's is used up)", n)
	}
}

func countRun(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Run {
			n++
		}
	}
	return n
}

func TestTokenBucketReserveUnit(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	b := TokenBucket{Rate: 1, Burst: 20, Reserve: 10, MinPriority: 5}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"api": {TokenBucket: &b}}, Options{})

	// low priority may take only what leaves the reserve
	ds, err := l.Admit(ctx, items("api", 15, 0))
	if got := countRun(ds); err != nil || got != 10 {
		t.Fatalf("low priority took %d %v, want 10 (burst 20 - reserve 10)", got, err)
	}
	now := redisMillis(t, rdb)
	ds, err = l.Admit(ctx, items("api", 1, 0))
	if err != nil || ds[0].Run || ds[0].Reason != ReasonTokenBucket {
		t.Fatalf("low priority inside the reserve: %+v %v", ds, err)
	}
	// it needs 11 tokens; there are ~10 and one comes per second
	if w := ds[0].NotBefore.UnixMilli() - now; w < 500 || w > 1100 {
		t.Fatalf("low priority may pass in %d ms, want about 1000", w)
	}
	// high priority takes the reserve
	ds, err = l.Admit(ctx, items("api", 7, 5))
	if got := countRun(ds); err != nil || got != 7 {
		t.Fatalf("high priority took %d %v, want 7", got, err)
	}

	// the same through Admit: high ones run, low ones are deferred
	batch := append(items("api", 3, 0), items("api", 3, 9)...)
	ds, err = l.Admit(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		high := batch[i].Priority >= 5
		if d.Run != high {
			t.Fatalf("item %d priority %d: run=%v", i, batch[i].Priority, d.Run)
		}
		if !high && (d.Reason != ReasonTokenBucket || !d.NotBefore.After(time.UnixMilli(now))) {
			t.Fatalf("low item deferred %+v", d)
		}
	}
	u, err := l.Usage(ctx, "api", Rule{TokenBucket: &b})
	if err != nil || u.Tokens < 0 || u.Tokens >= 1 {
		t.Fatalf("usage %+v %v: tokens should be in [0,1)", u, err)
	}

	// the bucket never holds more than burst
	shiftOf(t, l).Add(time.Hour.Milliseconds())
	if u, _ := l.Usage(ctx, "api", Rule{TokenBucket: &b}); u.Tokens != 20 {
		t.Fatalf("after an hour the bucket holds %v, want burst 20", u.Tokens)
	}
	if ds, err := l.Admit(ctx, items("api", 100, 9)); err != nil || countRun(ds) != 20 {
		t.Fatalf("took %d %v after an hour, want burst 20", countRun(ds), err)
	}
}

// Deferred token-bucket items come back spread at the refill rate rather
// than all at once.
func TestTokenBucketNotBeforeSpread(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	b := TokenBucket{Rate: 100, Burst: 5}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"x": {TokenBucket: &b}}, Options{})
	ds, err := l.Admit(t.Context(), items("x", 25, 0))
	if err != nil {
		t.Fatal(err)
	}
	var nbs []int64
	for _, d := range ds {
		if !d.Run {
			nbs = append(nbs, d.NotBefore.UnixMilli())
		}
	}
	if len(nbs) != 20 {
		t.Fatalf("deferred %d, want 20 (burst 5)", len(nbs))
	}
	// 20 items at 100/s: the last one ~200 ms after the first
	if span := nbs[len(nbs)-1] - nbs[0]; span < 180 || span > 200 {
		t.Fatalf("deferred items span %d ms, want ~190 ms (one token each at 100/s)", span)
	}
	if !slices.IsSorted(nbs) {
		t.Fatalf("not spread in order: %v", nbs)
	}
}

// Admitted items hold concurrency slots until Done; a full limit defers
// the next item by the retry delay; Refresh renews a held slot and reports
// a slot that is not held.
func TestConcurrencySlots(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	c := Concurrency{Limit: 2, SlotTTL: dur(time.Minute)}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"conv": {Concurrency: &c}}, Options{ConcurrencyRetry: 50 * time.Millisecond})
	held := items("conv", 2, 0)
	ds, err := l.Admit(ctx, held)
	if err != nil || countRun(ds) != 2 || ds[0].Slot() == "" || ds[0].Slot() == ds[1].Slot() {
		t.Fatalf("two slots of 2: %+v %v", ds, err)
	}
	now := redisMillis(t, rdb)
	third, err := l.Admit(ctx, items("conv", 1, 0))
	if err != nil || third[0].Run || third[0].Reason != ReasonConcurrency {
		t.Fatalf("third slot of 2: %+v %v", third, err)
	}
	if w := third[0].NotBefore.UnixMilli() - now; w < 30 || w > 200 {
		t.Fatalf("retry in %d ms, want about the 50 ms retry", w)
	}
	if ok, err := l.Refresh(ctx, held[0], ds[0]); err != nil || !ok {
		t.Fatalf("refresh held slot: %v %v", ok, err)
	}
	unknown := Decision{Run: true, slot: "zz", slotTTL: time.Minute, runKey: ds[0].runKey, rel: relType}
	if ok, err := l.Refresh(ctx, held[0], unknown); err != nil || ok {
		t.Fatalf("refresh unknown slot: %v %v", ok, err)
	}
	if err := l.Done(ctx, held[0], ds[0]); err != nil {
		t.Fatal(err)
	}
	if again, err := l.Admit(ctx, items("conv", 1, 0)); err != nil || !again[0].Run {
		t.Fatalf("after Done: %+v %v", again, err)
	}
	if u, err := l.Usage(ctx, "conv", Rule{Concurrency: &c}); err != nil || u.Running != 2 {
		t.Fatalf("usage %+v %v, want running 2", u, err)
	}
}

// A task held back by a full concurrency limit waits until the earliest
// held slot expires when that is sooner than the retry; the type's slot
// set is a skip list from its first slot (skiplist_pad, common.lua), and
// its pad is neither a slot nor an expiry.
func TestConcurrencyWaitEndsAtEarliestExpiry(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	c := Concurrency{Limit: 1, SlotTTL: dur(2 * time.Second)}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"conv": {Concurrency: &c}}, Options{ConcurrencyRetry: time.Minute})
	if ds, err := l.Admit(ctx, items("conv", 1, 0)); err != nil || countRun(ds) != 1 {
		t.Fatalf("first slot: %+v %v", ds, err)
	}
	run := typeKeys(l.ns, "conv")[keyRunning]
	if enc, err := rdb.ObjectEncoding(ctx, run).Result(); err != nil || enc != "skiplist" {
		t.Fatalf("the slot set is a %q (%v), want a skiplist", enc, err)
	}
	now := redisMillis(t, rdb)
	ds, err := l.Admit(ctx, items("conv", 1, 0))
	if err != nil || ds[0].Run || ds[0].Reason != ReasonConcurrency {
		t.Fatalf("second slot of 1: %+v %v", ds, err)
	}
	if w := ds[0].NotBefore.UnixMilli() - now; w < 1000 || w > 2100 {
		t.Fatalf("waits %d ms, want until the held slot expires (2 s), not the 1 min retry", w)
	}
}

// A holder that never releases (a crashed worker) loses its slots after
// the TTL; until then nobody else gets one.
func TestCrashedHolderSlotsExpire(t *testing.T) {
	srv := testenv.StartRedis(t)
	ns := testNS(t)
	c := Concurrency{Limit: 5, SlotTTL: dur(time.Second)}
	rules := StaticRules{"slow": {Concurrency: &c}}
	crashed := newLimiter(t, srv.Client(t), ns, rules, Options{})
	other := newLimiter(t, srv.Client(t), ns, rules, Options{ConcurrencyRetry: 20 * time.Millisecond})
	ctx := t.Context()

	ds, err := crashed.Admit(ctx, items("slow", 5, 0))
	if err != nil || countRun(ds) != 5 {
		t.Fatalf("crashed worker admitted %d %v", countRun(ds), err)
	}
	took := time.Now()
	ds, err = other.Admit(ctx, items("slow", 3, 0))
	if err != nil || countRun(ds) != 0 || ds[0].Reason != ReasonConcurrency {
		t.Fatalf("got a slot while 5 of 5 are held: %+v %v", ds, err)
	}
	// the crashed worker never calls Done: poll until its slots expire
	var freed time.Duration
	testenv.WaitFor(t, 3*time.Second, "crashed worker's slots to expire", func() bool {
		ds, err := other.Admit(ctx, items("slow", 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Run {
			freed = time.Since(took)
			return true
		}
		return false
	})
	t.Logf("slots of the crashed holder freed after %v (slot_ttl 1s)", freed.Round(time.Millisecond))
	if freed < 900*time.Millisecond {
		t.Fatalf("slots freed after %v, before the 1s TTL", freed)
	}
	if err := other.Done(ctx, Item{Type: "slow"}, ds[0]); err != nil {
		t.Fatal(err)
	}
}

func TestMetrics(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	reg := prometheus.NewRegistry()
	rules := StaticRules{"m": {
		WindowQuota: &WindowQuota{Limit: 5, Window: dur(time.Hour)},
		TokenBucket: &TokenBucket{Rate: 1, Burst: 100},
		Concurrency: &Concurrency{Limit: 100, SlotTTL: dur(time.Minute)},
	}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{Registerer: reg})
	alignShift(t, rdb, time.Hour, l)
	if _, err := l.Admit(t.Context(), append(items("m", 8, 0), items("free", 3, 0)...)); err != nil {
		t.Fatal(err)
	}
	// a second limiter on the same registry shares the collectors
	if _, err := NewLimiter(rdb, rules, Options{Registerer: reg}); err != nil {
		t.Fatalf("second limiter on one registry: %v", err)
	}
	check := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	series := gather(t, reg)
	check("admitted", series[`delayq_limit_admitted_total{type="m"}`], 5)
	check("deferred window", series[`delayq_limit_deferred_total{reason="window_quota",type="m"}`], 3)
	check("deferred token", series[`delayq_limit_deferred_total{reason="token_bucket",type="m"}`], 0)
	check("window_count", series[`delayq_limit_window_count{type="m"}`], 5)
	check("running", series[`delayq_limit_running{type="m"}`], 5)
	if tok := series[`delayq_limit_tokens{type="m"}`]; tok < 95 || tok > 96 {
		t.Errorf("tokens = %v, want 95..96", tok)
	}
	// admitted 1 + deferred 4 reasons + 3 gauges; unlimited types get none
	if len(series) != 8 {
		t.Errorf("series %v, want 8", series)
	}
	// the rule goes away: the type's gauges go too
	l.rules = StaticRules{}
	if _, err := l.Admit(t.Context(), items("m", 1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := gather(t, reg)[`delayq_limit_tokens{type="m"}`]; ok {
		t.Errorf("stale tokens gauge of a type without a rule")
	}
}

// After SCRIPT FLUSH (as after a Redis restart) both the single-call and the
// pipelined path reload their scripts.
func TestAdmitAfterScriptFlush(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	q := &WindowQuota{Limit: 100, Window: dur(time.Hour)}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"a": {WindowQuota: q}, "b": {WindowQuota: q}}, Options{})
	for _, batch := range [][]Item{items("a", 2, 0), append(items("a", 2, 0), items("b", 2, 0)...)} {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ds, err := l.Admit(ctx, batch)
		if err != nil || countRun(ds) != len(batch) {
			t.Fatalf("after SCRIPT FLUSH: %d run, %v", countRun(ds), err)
		}
	}
}

// All three limits on several types work on a Redis Cluster (every script
// touches one slot; the pipeline spans nodes).
func TestAdmitRedisCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t).Client(t)
	ctx := t.Context()
	rule := Rule{
		WindowQuota: &WindowQuota{Limit: 3, Window: dur(time.Hour)},
		TokenBucket: &TokenBucket{Rate: 1, Burst: 100},
		Concurrency: &Concurrency{Limit: 100, SlotTTL: dur(time.Minute)},
	}
	rules := StaticRules{}
	var batch []Item
	for _, typ := range []string{"alpha", "beta", "gamma", "delta", "weird}type"} {
		rules[typ] = rule
		batch = append(batch, items(typ, 5, 0)...)
	}
	l := newLimiter(t, cl, testNS(t), rules, Options{})
	alignShift(t, cl, time.Hour, l)
	ds, err := l.Admit(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if n := countRun(ds); n != 15 {
		t.Fatalf("admitted %d, want 3 per type", n)
	}
	for i, d := range ds {
		if err := l.Done(ctx, batch[i], d); err != nil {
			t.Fatal(err)
		}
	}
	u, err := l.UsageOf(ctx, rules)
	if err != nil {
		t.Fatal(err)
	}
	for typ, u := range u {
		if u.WindowCount != 3 || u.Running != 0 || u.Tokens < 97 {
			t.Fatalf("%s usage %+v", typ, u)
		}
	}
}

// A failing Redis makes Admit return an error and no decisions.
func TestAdmitRedisDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	l := newLimiter(t, rdb, testNS(t), StaticRules{"x": {Concurrency: &Concurrency{Limit: 5, SlotTTL: dur(time.Minute)}}}, Options{})
	srv.Kill(t)
	ds, err := l.Admit(t.Context(), items("x", 3, 0))
	if err == nil || ds != nil {
		t.Fatalf("Admit with Redis down: %v %v", ds, err)
	}
	if !strings.Contains(err.Error(), "admit x") {
		t.Fatalf("error %q should name the type", err)
	}
	// unlimited types still run
	if ds, err := l.Admit(t.Context(), items("free", 3, 0)); err != nil || countRun(ds) != 3 {
		t.Fatalf("unlimited with Redis down: %v", err)
	}
}

// gather returns every series of reg as `name{label="v",...}` -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// All three limits on one type: the items that run are a prefix in
// priority order, and each deferred item names the first limit that holds
// it back (window, then tokens, then concurrency).
func TestAdmitCombined(t *testing.T) {
	hook := new(countHook)
	rdb := testenv.StartRedis(t).Client(t)
	rdb.AddHook(hook)
	ctx := t.Context()
	rule := Rule{
		WindowQuota: &WindowQuota{Limit: 5, Window: dur(time.Hour)},
		TokenBucket: &TokenBucket{Rate: 1e-6, Burst: 10, Reserve: 4, MinPriority: 5}, // no refill to speak of
		Concurrency: &Concurrency{Limit: 3, SlotTTL: dur(24 * time.Hour)},
	}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"c": rule}, Options{})
	alignShift(t, rdb, time.Hour, l)
	mk := func(hi, lo int) []Item {
		var b []Item
		for i := range lo {
			b = append(b, Item{ID: fmt.Sprintf("lo%d", i), Type: "c", Priority: 0})
		}
		for i := range hi {
			b = append(b, Item{ID: fmt.Sprintf("hi%d", i), Type: "c", Priority: 9})
		}
		return b
	}
	type want struct {
		hiRun, loRun int
		hiWhy, loWhy string
	}
	check := func(step string, batch []Item, ds []Decision, w want) {
		t.Helper()
		var got want
		for i, d := range ds {
			hi := batch[i].Priority >= 5
			switch {
			case d.Run && hi:
				got.hiRun++
			case d.Run:
				got.loRun++
			case hi:
				got.hiWhy = d.Reason
			default:
				got.loWhy = d.Reason
			}
		}
		if got != w {
			t.Fatalf("%s: got %+v, want %+v", step, got, w)
		}
	}
	// 1: window 0/5, tokens 10 (reserve 4), running 0/3: both highs, then one
	// low (3 slots), the other lows wait for a slot
	b := mk(2, 4)
	ds1, err := l.Admit(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	check("step 1", b, ds1, want{2, 1, "", ReasonConcurrency})
	slots := map[string]bool{}
	for i, d := range ds1 {
		if d.Run {
			slots[d.Slot()] = true
			if held, err := l.Refresh(ctx, b[i], d); err != nil || !held {
				t.Fatalf("refresh a held slot: %v %v", held, err)
			}
			if err := l.Done(ctx, b[i], d); err != nil {
				t.Fatal(err)
			}
			if held, err := l.Refresh(ctx, b[i], d); err != nil || held {
				t.Fatalf("refresh after Done: %v %v", held, err)
			}
		} else if err := l.Done(ctx, b[i], d); err != nil || d.Slot() != "" {
			t.Fatalf("Done of a deferred item: %v (slot %q)", err, d.Slot())
		}
	}
	if len(slots) != 3 || slots[""] {
		t.Fatalf("slots %v: want 3 distinct", slots)
	}
	// 2: window 3/5, tokens 7, running 0/3: two highs use up the window
	b = mk(4, 2)
	ds, err := l.Admit(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	check("step 2", b, ds, want{2, 0, ReasonWindowQuota, ReasonWindowQuota})
	// 3: next window 0/5, tokens 5, running 2/3 (step 2 not released): one
	// high takes the last slot; lows are below the reserve (5-1-1 < 4), so
	// tokens hold them back before concurrency does
	shiftOf(t, l).Add(time.Hour.Milliseconds())
	b = mk(3, 3)
	ds, err = l.Admit(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	check("step 3", b, ds, want{1, 0, ReasonConcurrency, ReasonTokenBucket})

	// a group larger than one script call: still one round trip
	big := StaticRules{"big": {WindowQuota: &WindowQuota{Limit: 1000, Window: dur(time.Hour)}}}
	l2 := newLimiter(t, rdb, l.ns, big, Options{})
	shiftOf(t, l2).Store(shiftOf(t, l).Load())
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err) // a connection for pipelines is set up (HELLO) outside the count
	}
	before := hook.roundTrips()
	ds, err = l2.Admit(ctx, items("big", 1200, 0))
	if err != nil {
		t.Fatal(err)
	}
	if rt := hook.roundTrips() - before; rt != 1 {
		t.Fatalf("1200 items cost %d round trips", rt)
	}
	if n := countRun(ds); n != 1000 || ds[999].Run != true || ds[1000].Run {
		t.Fatalf("admitted %d of 1200 with quota 1000 (or not the first ones)", n)
	}
}

// A slot renewed every RenewEvery (a third of its TTL) stays held however
// long its handler runs: nobody else gets it for three TTLs. Once the
// renewals stop (the holder crashed) it expires one TTL after the last.
func TestRenewedSlotHoldsWhileRunning(t *testing.T) {
	srv := testenv.StartRedis(t)
	ns := testNS(t)
	ttl := 600 * time.Millisecond
	c := Concurrency{Limit: 1, SlotTTL: dur(ttl)}
	rules := StaticRules{"slow": {Concurrency: &c}}
	holder := newLimiter(t, srv.Client(t), ns, rules, Options{})
	other := newLimiter(t, srv.Client(t), ns, rules, Options{ConcurrencyRetry: 20 * time.Millisecond})
	ctx := t.Context()

	ds, err := holder.Admit(ctx, items("slow", 1, 0))
	if err != nil || !ds[0].Run {
		t.Fatalf("first admit: %+v %v", ds, err)
	}
	d := ds[0]
	if got := d.RenewEvery(); got != ttl/3 {
		t.Fatalf("RenewEvery %v, want %v", got, ttl/3)
	}
	it := Item{ID: "slow-0", Type: "slow"}
	end := time.Now().Add(3 * ttl)
	next := time.Now().Add(d.RenewEvery())
	for time.Now().Before(end) {
		if time.Now().After(next) {
			if held, err := holder.Refresh(ctx, it, d); err != nil || !held {
				t.Fatalf("refresh: %v %v", held, err)
			}
			next = next.Add(d.RenewEvery())
		}
		ods, err := other.Admit(ctx, items("slow", 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		if ods[0].Run {
			t.Fatalf("a second task got the only slot while its holder renews it")
		}
		time.Sleep(20 * time.Millisecond) // the handler's work between two checks
	}
	// the holder crashed: no more renewals, no Done
	stopped := time.Now()
	testenv.WaitFor(t, 3*time.Second, "the crashed holder's slot to expire", func() bool {
		ods, err := other.Admit(ctx, items("slow", 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		if ods[0].Run {
			_ = other.Done(ctx, Item{Type: "slow"}, ods[0])
			return true
		}
		return false
	})
	t.Logf("slot freed %v after the last renewal window (slot_ttl %v)", time.Since(stopped).Round(time.Millisecond), ttl)
	if held, err := holder.Refresh(ctx, it, d); err != nil || held {
		t.Fatalf("refresh of an expired slot: %v %v, want false", held, err)
	}
}

// Limits (worker.LimitScoper) is true for a type with a rule, false for
// one without; a type whose rule went away stays limited until an Admit
// has cleared its gauges, so that the worker still calls Admit once.
func TestLimitsScope(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	rules := StaticRules{"mail": {Concurrency: &Concurrency{Limit: 5, SlotTTL: dur(10 * time.Second)}}}
	l := newLimiter(t, rdb, testNS(t), rules, Options{Registerer: prometheus.NewRegistry()})
	if !l.Limits("mail") || l.Limits("sms") {
		t.Fatalf("Limits(mail) = %v, Limits(sms) = %v; want true, false", l.Limits("mail"), l.Limits("sms"))
	}
	ds, err := l.Admit(t.Context(), items("mail", 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if err := l.Done(t.Context(), items("mail", 2, 0)[i], d); err != nil {
			t.Fatal(err)
		}
	}
	delete(rules, "mail")
	if !l.Limits("mail") {
		t.Fatal("a type whose rule went away must stay limited until Admit cleared its gauges")
	}
	if _, err := l.Admit(t.Context(), items("mail", 1, 0)); err != nil {
		t.Fatal(err)
	}
	if l.Limits("mail") {
		t.Fatal("Limits(mail) after the Admit that cleared its gauges: want false")
	}
	if (&Limiter{}).Limits("mail") {
		t.Fatal("a Limiter without rules limits nothing")
	}
}
