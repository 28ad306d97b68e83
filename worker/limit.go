package worker

import (
	"context"
	"sync"
	"time"
)

// Limiter decides which fetched tasks may run now: per-type rate limits
// shared by every worker (delayq's own is internal/ratelimit, wired by the
// work binary; embedders may pass any implementation). A nil Limiter in
// Config runs everything.
type Limiter interface {
	// Admit decides a micro-batch of claimed tasks, one decision per item
	// in order. Deferred items go back to Redis due at NotBefore without
	// using an attempt. An error defers the whole batch a short time
	// (fail closed); nothing is dropped.
	Admit(ctx context.Context, items []LimitItem) ([]LimitDecision, error)
	// Done is called when the handler of an admitted item returned
	// (whatever the outcome), e.g. to free a concurrency slot.
	Done(ctx context.Context, item LimitItem, d LimitDecision)
}

// LimitItem is one task as a Limiter sees it.
type LimitItem struct {
	ID       string
	Type     string
	Priority int
}

// LimitDecision says whether an item runs now.
type LimitDecision struct {
	Run       bool
	NotBefore time.Time // deferred: when it may pass (zero: after limitRetry)
	Reason    string    // deferred: why (a label for logs and metrics)
	Ticket    any       // the Limiter's own state, handed back to Done
	// RenewEvery, when positive on an admitted item and the Limiter is a
	// LimitRenewer, is how often the worker calls Renew while the item
	// waits for a handler slot and while its handler runs (e.g. a third of
	// a concurrency slot's TTL).
	RenewEvery time.Duration
}

// LimitRenewer is a Limiter whose admitted items hold something that
// expires unless renewed, such as a concurrency slot with a TTL: without
// renewals a handler that runs longer than the TTL would let another task
// take its slot. The worker renews every LimitDecision.RenewEvery until
// the handler returned, then calls Done. A worker that crashed stops
// renewing, so what it held still expires.
type LimitRenewer interface {
	Limiter
	// Renew extends what the admitted item holds. held is false when it
	// was lost already (expired: the limit may be exceeded until the
	// handler returns).
	Renew(ctx context.Context, item LimitItem, d LimitDecision) (held bool, err error)
}

// limitRetry is how long a batch waits when the Limiter failed, or a
// deferred item without a NotBefore.
const limitRetry = time.Second

// renewLimit renews what an admitted item holds every it.dec.RenewEvery
// (see LimitRenewer) until the returned stop is called; stop waits for a
// renewal in flight and may be called more than once.
func (w *Worker) renewLimit(ctx context.Context, it *item) (stop func()) {
	r, ok := w.cfg.Limiter.(LimitRenewer)
	every := it.dec.RenewEvery
	if !ok || every <= 0 || !it.dec.Run {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			held, err := r.Renew(rctx, it.limitItem(), it.dec)
			cancel()
			switch {
			case err != nil:
				w.met.slotRenewals.WithLabelValues("error").Inc()
				it.log.Warn("renew rate-limit slot", "type", it.t.Type, "err", err)
			case !held:
				w.met.slotRenewals.WithLabelValues("lost").Inc()
				it.log.Warn("rate-limit slot expired before it was renewed; the type's concurrency limit may be exceeded until this handler returns", "type", it.t.Type)
			default:
				w.met.slotRenewals.WithLabelValues("ok").Inc()
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
