package worker

import (
	"context"
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
}

// limitRetry is how long a batch waits when the Limiter failed, or a
// deferred item without a NotBefore.
const limitRetry = time.Second
