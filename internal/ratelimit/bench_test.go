package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkAdmit measures one Admit call on a fetched batch of 100 items,
// against a local redis-server (loopback, one client, sequential calls), for
// each kind of limit. Limits are set so that every item passes (the cost of
// admitting), except window_exhausted (every item deferred). It reports
// Redis round trips per batch (counted with a go-redis hook: one per
// command or pipeline) and µs per task (time per batch / 100).
func BenchmarkAdmit(b *testing.B) {
	// b.Log of a parent benchmark is not shown; the method goes to stdout.
	fmt.Println("BenchmarkAdmit method: Admit on batches of 100 items, one go-redis client, local redis-server " +
		"(testenv, loopback), sequential calls; round trips counted with a go-redis hook; " +
		"µs/task = ns/op / 100 / 1000. concurrency uses slot_ttl 1s and never releases, so " +
		"the slot set holds about one second of admissions; concurrency_with_done also calls Done " +
		"for every admitted task (one ZREM round trip each), as a worker does when a handler ends.")
	srv := testenv.StartRedis(b)
	big := int64(MaxLimit)
	window := &WindowQuota{Limit: big, Window: dur(24 * time.Hour)}
	bucket := &TokenBucket{Rate: MaxRate, Burst: big}
	conc := &Concurrency{Limit: big, SlotTTL: dur(time.Second)}
	all := Rule{WindowQuota: window, TokenBucket: bucket, Concurrency: conc}
	one := func(typ string, r Rule) StaticRules { return StaticRules{typ: r} }
	four := StaticRules{}
	var fourTypes []Item
	for k := range 4 {
		typ := fmt.Sprintf("t%d", k)
		four[typ] = all
		fourTypes = append(fourTypes, items(typ, 25, k)...)
	}
	cases := []struct {
		name  string
		rules StaticRules
		batch []Item
	}{
		{"no_rule", StaticRules{}, items("x", 100, 0)},
		{"window_quota", one("x", Rule{WindowQuota: window}), items("x", 100, 0)},
		{"window_exhausted", one("x", Rule{WindowQuota: &WindowQuota{Limit: 1, Window: dur(24 * time.Hour)}}), items("x", 100, 0)},
		{"token_bucket", one("x", Rule{TokenBucket: bucket}), items("x", 100, 0)},
		{"concurrency", one("x", Rule{Concurrency: conc}), items("x", 100, 0)},
		{"concurrency_with_done", one("x", Rule{Concurrency: conc}), items("x", 100, 0)},
		{"all_three", one("x", all), items("x", 100, 0)},
		{"all_three_4_types", four, fourTypes},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rdb := srv.Client(b)
			hook := new(countHook)
			rdb.AddHook(hook)
			l := newLimiter(b, rdb, testNS(b), c.rules, Options{})
			ctx := b.Context()
			if _, err := l.Admit(ctx, c.batch); err != nil { // loads the script, opens the connection
				b.Fatal(err)
			}
			before := hook.roundTrips()
			start := time.Now()
			n := 0
			withDone := c.name == "concurrency_with_done"
			for b.Loop() {
				ds, err := l.Admit(ctx, c.batch)
				if err != nil {
					b.Fatal(err)
				}
				if withDone { // what a worker adds per task when its handler ends
					for i, d := range ds {
						if err := l.Done(ctx, c.batch[i], d); err != nil {
							b.Fatal(err)
						}
					}
				}
				n++
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(hook.roundTrips()-before)/float64(n), "roundtrips/batch")
			b.ReportMetric(float64(elapsed.Microseconds())/float64(n*len(c.batch)), "µs/task")
		})
	}
}
