package worker

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/work/engine"
)

// BenchmarkLimiterNoRule: what the live limits cost a worker per task of a
// type without a rule (most types), as the engine calls them: before
// LimitScoper, Admit on each micro-batch (the batch copied through the
// worker's face and LiveLimits into the limiter and the decisions back)
// and Done per task; now one Limits lookup per run of a type in the batch.
// Per op: a micro-batch of 64 tasks of one type.
//
//	go test ./worker -run '^$' -bench BenchmarkLimiterNoRule -benchmem
func BenchmarkLimiterNoRule(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called: no type has a rule
	defer rdb.Close()
	lim, err := ratelimit.NewLimiter(rdb, ratelimit.StaticRules{}, ratelimit.Options{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	el := limiterOf(&LiveLimits{lim: lim})
	items := make([]engine.LimitItem, 64)
	for i := range items {
		items[i] = engine.LimitItem{ID: "task-" + string(rune('a'+i%26)), Type: "email", Key: "k", Due: time.Now()}
	}
	b.Run("admit+done", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			lis := make([]engine.LimitItem, len(items)) // engine.limit's copy
			copy(lis, items)
			ds, err := el.Admit(b.Context(), lis)
			if err != nil {
				b.Fatal(err)
			}
			for i := range ds {
				el.Done(b.Context(), lis[i], ds[i])
			}
		}
	})
	b.Run("scoped", func(b *testing.B) {
		b.ReportAllocs()
		s := el.(engine.LimitScoper)
		for b.Loop() {
			if s.Limits(items[0].Type) {
				b.Fatal("a type without a rule is limited")
			}
		}
	})
}
