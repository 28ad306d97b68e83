package ratelimit

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Issue 40 item 5: a token bucket with rate 1e-17 and burst 1 admitted
// every task (the bucket key got a negative TTL, which deleted it, and
// the deferrals a wait of -2^63 ms). Such a rule, stored before MinRate
// existed, must admit one task and defer every later one, each due
// within MaxDeferral.
func TestTinyRateAdmitsOneDefersRest(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	b := TokenBucket{Rate: 1e-17, Burst: 1}
	l := newLimiter(t, rdb, testNS(t), StaticRules{"t": {TokenBucket: &b}}, Options{})
	ran := 0
	for i := range 4 {
		now := redisMillis(t, rdb)
		ds, err := l.Admit(ctx, items("t", 1+i%2, 0)) // single tasks and pairs, as they come
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Run {
				ran++
				continue
			}
			if d.Reason != ReasonTokenBucket {
				t.Fatalf("deferred for %q, want %q", d.Reason, ReasonTokenBucket)
			}
			if w := d.NotBefore.UnixMilli() - now; w < maxDeferralMs-5000 || w > maxDeferralMs+5000 {
				t.Fatalf("deferred %d ms ahead, want MaxDeferral (%d ms): the next token is centuries away", w, maxDeferralMs)
			}
		}
		if ttl := rdb.PTTL(ctx, typeKeys(l.ns, "t")[keyBucket]).Val(); ttl <= 0 {
			t.Fatalf("batch %d: bucket key TTL %v: the bucket must persist (a missing bucket is full)", i, ttl)
		}
	}
	if ran != 1 {
		t.Fatalf("%d tasks ran with burst 1 and a rate of 1e-17/s, want 1", ran)
	}
}

// With rate 1e-10 the deferrals were due in 2343 and 2660, beyond the
// latest due time the store holds (task.MaxDueMillis, 2248). They are cut
// to MaxDeferral; near MaxDueMillis (Redis' clock shifted there), every
// kind of deferral is due at MaxDueMillis at the latest.
func TestDeferralsWithinMaxDue(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	rules := StaticRules{
		"tiny":   {TokenBucket: &TokenBucket{Rate: 1e-10, Burst: 1}},
		"low":    {TokenBucket: &TokenBucket{Rate: MinRate, Burst: MaxLimit, Reserve: MaxLimit - 1, MinPriority: 5}},
		"window": {WindowQuota: &WindowQuota{Limit: 1, Window: dur(MaxWindow)}},
		"conc":   {Concurrency: &Concurrency{Limit: 1, SlotTTL: dur(MaxSlotTTL)}},
	}
	l := newLimiter(t, rdb, testNS(t), rules, Options{ConcurrencyRetry: time.Hour})
	check := func(t *testing.T, typ string, prio int, limit int64) {
		t.Helper()
		ds, err := l.Admit(ctx, items(typ, 3, prio))
		if err != nil {
			t.Fatal(err)
		}
		deferred := 0
		for _, d := range ds {
			if d.Run {
				continue
			}
			deferred++
			if nb := d.NotBefore.UnixMilli(); nb > limit || nb > task.MaxDueMillis {
				t.Fatalf("%s deferred until %s, after %s", typ, d.NotBefore.UTC(), time.UnixMilli(limit).UTC())
			}
		}
		if deferred < 2 {
			t.Fatalf("%s: %d of 3 deferred, want at least 2", typ, deferred)
		}
	}
	t.Run("now", func(t *testing.T) {
		limit := redisMillis(t, rdb) + maxDeferralMs + 5000
		check(t, "tiny", 0, limit)
		check(t, "low", 0, limit) // a billion tokens of reserve at one a day
	})
	t.Run("near MaxDue", func(t *testing.T) {
		shiftOf(t, l).Store(task.MaxDueMillis - 1000 - redisMillis(t, rdb))
		for _, typ := range []string{"tiny", "low", "window", "conc"} {
			check(t, typ, 0, task.MaxDueMillis)
		}
	})
}

// tokenWaitMs never overflows, never goes below 1 ms or beyond
// MaxDeferral, and never gives a later item (one more ahead of it) an
// earlier time, whatever the rule (rules stored before MinRate; values
// Validate refuses) and the tokens the script reported; notBefore stays
// within task.MaxDueMillis for any clock.
func FuzzTokenWait(f *testing.F) {
	f.Add(1e-17, int64(1), int64(0), 0, 0.0, uint16(0), int64(1_700_000_000_000))
	f.Add(1e-10, int64(1), int64(0), 0, 0.5, uint16(2), int64(1_700_000_000_000))
	f.Add(MinRate, int64(MaxLimit), int64(MaxLimit-1), 5, 0.0, uint16(499), int64(task.MaxDueMillis-10))
	f.Add(float64(MaxRate), int64(1), int64(0), 0, -3.0, uint16(7), int64(0))
	f.Add(100.0, int64(5), int64(2), 1, math.NaN(), uint16(1), int64(-5))
	f.Add(0.0, int64(5), int64(2), 1, math.Inf(-1), uint16(1), int64(math.MaxInt64))
	f.Add(-1.0, int64(5), int64(2), 1, math.Inf(1), uint16(1), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, rate float64, burst, reserve int64, minPrio int, tokens float64, ahead uint16, now int64) {
		b := &TokenBucket{Rate: rate, Burst: burst, Reserve: reserve, MinPriority: minPrio}
		for _, prio := range []int{minPrio - 1, minPrio} {
			w := tokenWaitMs(b, prio, tokens, int(ahead))
			if w < 1 || w > maxDeferralMs {
				t.Fatalf("rate %v reserve %d tokens %v ahead %d: wait %d ms, want 1..%d", rate, reserve, tokens, ahead, w, maxDeferralMs)
			}
			if next := tokenWaitMs(b, prio, tokens, int(ahead)+1); next < w {
				t.Fatalf("rate %v tokens %v: item %d waits %d ms, the one before it %d ms", rate, tokens, ahead+1, next, w)
			}
			at := notBefore(now, w).UnixMilli()
			if at > task.MaxDueMillis {
				t.Fatalf("now %d + %d ms: due %d, after MaxDueMillis", now, w, at)
			}
			if now < task.MaxDueMillis-maxDeferralMs && at != now+w {
				t.Fatalf("now %d + %d ms: due %d", now, w, at)
			}
		}
	})
}

// Rules are validated at the bounds: each bound itself passes, one step
// beyond it is refused, naming the field.
func TestRuleBounds(t *testing.T) {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	cases := []struct {
		name, body, field string // field "": valid
	}{
		{"rate at MinRate", `{"token_bucket":{"rate":` + f(MinRate) + `,"burst":1}}`, ""},
		{"rate just below MinRate", `{"token_bucket":{"rate":` + f(math.Nextafter(MinRate, 0)) + `,"burst":1}}`, "token_bucket.rate"},
		{"rate one a week", `{"token_bucket":{"rate":` + f(1.0/(7*86400)) + `,"burst":1}}`, "token_bucket.rate"},
		{"rate 1e-10", `{"token_bucket":{"rate":1e-10,"burst":1}}`, "token_bucket.rate"},
		{"rate 1e-17", `{"token_bucket":{"rate":1e-17,"burst":1}}`, "token_bucket.rate"},
		{"smallest float rate", `{"token_bucket":{"rate":5e-324,"burst":1}}`, "token_bucket.rate"},
		{"rate at MaxRate", `{"token_bucket":{"rate":1000000,"burst":1}}`, ""},
		{"rate just above MaxRate", `{"token_bucket":{"rate":` + f(math.Nextafter(MaxRate, 2*MaxRate)) + `,"burst":1}}`, "token_bucket.rate"},
		{"burst at MaxLimit, reserve just below", `{"token_bucket":{"rate":` + f(MinRate) + `,"burst":1000000000,"reserve":999999999}}`, ""},
		{"burst above MaxLimit", `{"token_bucket":{"rate":1,"burst":1000000001}}`, "token_bucket.burst"},
		{"window at MaxWindow", `{"window_quota":{"limit":1000000000,"window":"24h"}}`, ""},
		{"window 1ms over", `{"window_quota":{"limit":1,"window":"24h0m0.001s"}}`, "window_quota.window"},
		{"window at 1ms", `{"window_quota":{"limit":1,"window":"1ms"}}`, ""},
		{"window below 1ms", `{"window_quota":{"limit":1,"window":"999us"}}`, "window_quota.window"},
		{"slot_ttl at bounds", `{"concurrency":{"limit":1000000000,"slot_ttl":"24h"}}`, ""},
		{"slot_ttl over", `{"concurrency":{"limit":1,"slot_ttl":"24h0m0.001s"}}`, "concurrency.slot_ttl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRule(strings.NewReader(c.body), 0)
			if c.field == "" {
				if err != nil {
					t.Fatalf("%s: %v", c.body, err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("%s: error %v, want a FieldError on %s", c.body, err, c.field)
			}
		})
	}
}

// A rule stored before MinRate existed (a rate of 1e-17) is still read,
// listed and applied: dropping it as undecodable would lift the limit.
// Put and the API refuse such a rate now.
func TestStoredTinyRateStillApplies(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	r := newRules(t, cli, ns)
	const old = `{"token_bucket":{"rate":1e-17,"burst":1,"reserve":0,"min_priority":0}}`
	if _, err := cli.Put(ctx, "/"+ns+"/limits/old", old); err != nil {
		t.Fatal(err)
	}
	got, ok, err := r.Get(ctx, "old")
	if err != nil || !ok || got.TokenBucket == nil || got.TokenBucket.Rate != 1e-17 {
		t.Fatalf("Get of the stored rule: %s %v %v", show(got), ok, err)
	}
	runRules(t, r)
	if _, ok := r.Rule("old"); !ok {
		t.Fatal("the stored rule is not in the watched snapshot: its type would run unlimited")
	}
	l := newLimiter(t, testenv.StartRedis(t).Client(t), ns, r, Options{})
	ran := 0
	for range 3 {
		ds, err := l.Admit(ctx, items("old", 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		ran += countRun(ds)
	}
	if ran != 1 {
		t.Fatalf("%d of 3 ran under the stored rule (burst 1, rate 1e-17), want 1", ran)
	}
	var fe *FieldError
	if err := r.Put(ctx, "new", got); !errors.As(err, &fe) || fe.Field != "token_bucket.rate" {
		t.Fatalf("Put of rate 1e-17: %v, want a FieldError on token_bucket.rate", err)
	}
}
