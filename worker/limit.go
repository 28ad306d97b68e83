package worker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/work/engine"
)

// ErrLimitSlotLost is the cause (context.Cause; match it with errors.Is)
// of a handler's context cancelled because what its task was admitted with
// by a [LimitRenewer] — a concurrency slot — was lost while the handler
// ran: a renewal found it gone, or, for a decision with HoldFor, the
// slot's lease ran out by this process's clock without a renewal
// confirming it (the process was paused, the Limiter's store answered too
// slowly), so another task may take the slot. A handler that returns an
// error then fails with an error that wraps ErrLimitSlotLost: a failed
// attempt, retried with backoff like any other (dead on the last
// attempt); one that returns nil has succeeded. A task whose slot was lost
// while it waited for a handler slot fails the same way without its
// handler being called.
//
// The overlap with the task that takes the slot next is bounded by how
// fast the handler honours its context: the lease ends a margin (a tenth
// of HoldFor, at most a second) before the slot can expire in the store.
// A process paused longer than HoldFor finds its lease over when it
// resumes, and its handler is cancelled then.
var ErrLimitSlotLost = engine.ErrLimitSlotLost

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

// LimitHolder is a Limiter that keeps the tasks of a key in order (a
// rule with a key or header scope, delayq's LiveLimits): the worker calls
// Hold when a task fails and goes to retry at until, before it calls
// Done, so that a later task of the key does not start before the retry.
// An error is logged; the retry is stored all the same.
type LimitHolder interface {
	Limiter
	Hold(ctx context.Context, item LimitItem, until time.Time) error
}

// LimitScoper is a Limiter that can tell without a round trip that it
// holds no task of a type back (delayq's LiveLimits: the type has no
// rule). The worker admits the tasks of a type for which Limits reports
// false without calling Admit, Hold or Done for them: most types of a
// deployment have no rule, and each call converts and copies the batch
// through every layer between the worker and the limiter. A rule added
// meanwhile applies from the next batch, as it would had the batch come a
// moment earlier.
type LimitScoper interface {
	Limiter
	Limits(typ string) bool
}

// LimitItem is one task as a Limiter sees it.
type LimitItem struct {
	ID       string
	Type     string
	Priority int
	// Key is the task's key ("" when it has none: the id stands for it),
	// Headers its own headers (shared with the task: read only) and Due
	// its due time: what a rule with a key or header scope limits by, and
	// orders by (api.LimitRule).
	Key     string
	Headers map[string]string
	Due     time.Time
}

// LimitDecision says whether an item runs now.
type LimitDecision struct {
	Run       bool
	NotBefore time.Time // deferred: when it may pass (zero: after a second)
	Reason    string    // deferred: why (a label for logs and metrics)
	Ticket    any       // the Limiter's own state, handed back to Done
	// RenewEvery, when positive on an admitted item and the Limiter is a
	// LimitRenewer, is how often the worker calls Renew while the item
	// waits for a handler slot and while its handler runs (e.g. a third of
	// a concurrency slot's TTL).
	RenewEvery time.Duration
	// HoldFor, when positive along with RenewEvery, is how long what the
	// item holds lasts without a renewal (a concurrency slot's TTL): from
	// HeldUntil on after the admission, and for HoldFor from the moment
	// each Renew that reported it held was called. The worker keeps that
	// lease by its own monotonic clock and fences the handler when it
	// runs out less a margin (see ErrLimitSlotLost). Zero: no local lease;
	// only a Renew that reports the hold lost fences the handler.
	HoldFor time.Duration
	// HeldUntil is when the admission's hold can end at the earliest, by
	// this process's clock (time.Now() taken before Admit sent its request,
	// plus HoldFor). Zero with HoldFor set: HoldFor from when the worker
	// dispatched the item, just after Admit returned.
	HeldUntil time.Time
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
