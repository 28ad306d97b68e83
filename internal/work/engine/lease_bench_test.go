package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// BenchmarkLeasedRun: what a concurrency slot's lease costs a worker per
// admitted task that ends before its first renewal (most do): the lease
// started, a no-op handler run under it, the lease stopped; against the
// same run without a lease. Allocations per op are the machine-independent
// figure.
//
//	go test ./internal/work/engine -run '^$' -bench BenchmarkLeasedRun -benchmem
func BenchmarkLeasedRun(b *testing.B) {
	ren := &scriptedRenewer{answers: []string{"ok"}, release: make(chan struct{})}
	e := &Engine{cfg: Config{Limiter: ren}, met: newMetrics(nil, 10), log: slog.New(slog.DiscardHandler)}
	noop := HandlerFunc(func(context.Context, *Execution) error { return nil })
	e.cfg.Handler = func(string) HandlerFunc { return noop }
	ctx := b.Context()
	ht := newHandlerTimer(ctx)
	defer ht.stop()
	x := &Execution{ID: "a", Type: "t", Timeout: time.Minute}
	log := slog.New(slog.DiscardHandler)
	for _, leased := range []bool{false, true} {
		name := "no-lease"
		if leased {
			name = "lease"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				it := &item{t: &task.Task{ID: "a", Type: "t"}, log: log,
					dec: LimitDecision{Run: true, RenewEvery: 5 * time.Second, HoldFor: 10 * time.Second}}
				if leased {
					e.renewLimit(ctx, it)
				}
				if _, err := e.execute(ctx, ht, log, x, time.Now(), it.lease, nil); err != nil {
					b.Fatal(err)
				}
				it.lease.stop()
			}
		})
	}
}
