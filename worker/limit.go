package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
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
var ErrLimitSlotLost = errors.New("rate-limit slot lost")

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

// limitRetry is how long a batch waits when the Limiter failed, or a
// deferred item without a NotBefore.
const limitRetry = time.Second

// Reasons a lease is lost (the reason label of
// delayq_work_limit_slots_lost_total).
const (
	slotExpired = "expired" // not renewed in time by this process's clock
	slotGone    = "gone"    // a renewal found it expired or released
)

// leaseMargin is how long before the end of its lease the holder of a
// slot gives it up: a tenth of the lease, at most a second. It covers the
// time the cancellation takes to reach the handler and a Redis clock that
// runs a little faster than this process's.
func leaseMargin(holdFor time.Duration) time.Duration { return min(holdFor/10, time.Second) }

// limitLease is what an admitted item holds from its Limiter (a
// concurrency slot), from its dispatch until its handler returned: it
// renews it every RenewEvery, keeps its lease by the local monotonic
// clock (a slot is valid until the last confirmed renewal's call time
// plus HoldFor, less a margin), and when the lease runs out or a renewal
// reports the hold lost, cancels the running handler's context with a
// cause wrapping ErrLimitSlotLost (see call).
type limitLease struct {
	w      *Worker
	it     *item
	r      LimitRenewer
	every  time.Duration
	hold   time.Duration // 0: no local lease
	margin time.Duration
	fence  *time.Timer // ends the lease at until (with hold)

	done chan struct{} // closed by stop
	wg   sync.WaitGroup
	once sync.Once

	mu      sync.Mutex
	until   time.Time               // the lease's end (with hold)
	lost    error                   // why it was lost; nil while held
	cancel  context.CancelCauseFunc // the running handler's; nil while none runs
	stopped bool
}

// renewLimit starts the lease of what an admitted item holds when the
// Limiter is a LimitRenewer (see limitLease; it sets it.lease) and returns
// its stop, which ends the renewals and waits for one in flight; it may be
// called more than once.
func (w *Worker) renewLimit(ctx context.Context, it *item) (stop func()) {
	r, ok := w.cfg.Limiter.(LimitRenewer)
	every := it.dec.RenewEvery
	if !ok || every <= 0 || !it.dec.Run {
		return func() {}
	}
	l := &limitLease{w: w, it: it, r: r, every: every, done: make(chan struct{})}
	if hold := it.dec.HoldFor; hold > 0 {
		l.hold, l.margin = hold, leaseMargin(hold)
		until := it.dec.HeldUntil
		if until.IsZero() {
			until = time.Now().Add(hold)
		}
		l.until = until.Add(-l.margin)
		l.fence = time.AfterFunc(time.Until(l.until), l.expire)
	}
	it.lease = l
	l.wg.Go(func() { l.renew(ctx) })
	return l.stop
}

// renew renews the hold every l.every until stop, ctx's end or the
// hold's loss.
func (l *limitLease) renew(ctx context.Context) {
	met, it := l.w.met, l.it
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.isLost() {
			return
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, l.every)
		held, err := l.r.Renew(rctx, it.limitItem(), it.dec)
		cancel()
		switch {
		case err != nil:
			met.slotRenewals.WithLabelValues("error").Inc()
			it.log.Warn("renew rate-limit slot", "type", it.t.Type, "err", err)
		case !held:
			met.slotRenewals.WithLabelValues("lost").Inc()
			l.lose(slotGone, "the limiter reports it expired or released")
			return
		default:
			met.slotRenewals.WithLabelValues("ok").Inc()
			l.renewed(sent)
		}
	}
}

// renewed extends the lease to HoldFor after sent, when a renewal called
// then was confirmed. A lease already lost stays lost.
func (l *limitLease) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil || l.hold <= 0 {
		return
	}
	if u := sent.Add(l.hold - l.margin); u.After(l.until) {
		l.until = u // the fence, when it fires, arms itself again (expire)
	}
}

// expire runs when the fence fires: it loses the lease if its end passed
// without a renewal, or arms the fence for the end a renewal set.
func (l *limitLease) expire() {
	l.mu.Lock()
	if l.lost != nil || l.stopped {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.until); d > 0 {
		l.fence.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(slotExpired, fmt.Sprintf("not renewed within its lease (%s less a %s margin)", l.hold, l.margin))
}

func (l *limitLease) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost != nil
}

// lose ends the lease for reason: it cancels the running handler (if
// any), counts and logs it, once.
func (l *limitLease) lose(reason, why string) {
	l.mu.Lock()
	if l.lost != nil || l.stopped {
		l.mu.Unlock()
		return
	}
	l.lost = fmt.Errorf("%w: %s", ErrLimitSlotLost, why)
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(l.lost)
	}
	l.w.met.slotsLost.WithLabelValues(reason).Inc()
	msg := "rate-limit slot lost while its task waited for a handler slot; the handler will not run"
	if cancel != nil {
		msg = "rate-limit slot lost; cancelling the handler (another task may take the slot)"
	}
	l.it.log.Warn(msg, "type", l.it.t.Type, "reason", reason, "why", why)
}

// stop ends the renewals and the fence, and waits for a renewal in flight.
func (l *limitLease) stop() {
	l.once.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		if l.fence != nil {
			l.fence.Stop()
		}
		close(l.done)
		l.wg.Wait()
	})
}

// call runs handler h for t under ctx, fenced by the lease l (nil: no
// lease, h runs under ctx): h's context is cancelled with l's loss as its
// cause when the lease is lost while h runs, and h's error then wraps it;
// a lease lost before h starts fails the run without calling h.
func (l *limitLease) call(ctx context.Context, log *slog.Logger, h HandlerFunc, t *Task) error {
	if l == nil {
		return call(ctx, log, h, t)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l.mu.Lock()
	lost := l.lost
	if lost == nil {
		l.cancel = cancel
	}
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	err := call(hctx, log, h, t)
	l.mu.Lock()
	l.cancel, lost = nil, l.lost
	l.mu.Unlock()
	if lost != nil && err != nil && !errors.Is(err, ErrLimitSlotLost) {
		err = fmt.Errorf("%w: %w", lost, err)
	}
	return err
}
