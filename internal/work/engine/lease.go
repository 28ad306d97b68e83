package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrLimitSlotLost is the cause of a handler's context cancelled because
// what its task was admitted with by a LimitRenewer (a concurrency slot)
// was lost while it waited or ran; worker.ErrLimitSlotLost is this error
// (its documentation says when).
var ErrLimitSlotLost = errors.New("rate-limit slot lost")

// Limiter decides which claimed tasks may run now: worker.Limiter over
// this package's LimitItem and LimitDecision (the worker package adapts
// one to the other; see worker.Limiter for the contract).
type Limiter interface {
	Admit(ctx context.Context, items []LimitItem) ([]LimitDecision, error)
	Done(ctx context.Context, item LimitItem, d LimitDecision)
}

// LimitRenewer is a Limiter whose admitted items hold something that
// expires unless renewed (worker.LimitRenewer).
type LimitRenewer interface {
	Limiter
	Renew(ctx context.Context, item LimitItem, d LimitDecision) (held bool, err error)
}

// LimitScoper is a Limiter that can tell without a round trip that it
// holds no task of a type back (worker.LimitScoper): the engine admits
// the tasks of such a type without calling Admit, Hold or Done.
type LimitScoper interface {
	Limits(typ string) bool
}

// LimitHolder is a Limiter that keeps the tasks of a key in order
// (worker.LimitHolder): a task that failed and goes to retry at until is
// held in its key's order first, so that a later task of the key does not
// overtake it.
type LimitHolder interface {
	Hold(ctx context.Context, item LimitItem, until time.Time) error
}

// LimitItem is one task as a Limiter sees it. Its fields are
// worker.LimitItem's, in order: the worker package converts one to the
// other.
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

// LimitDecision says whether an item runs now. Its fields are
// worker.LimitDecision's, in order (see there for their meaning): the
// worker package converts one to the other.
type LimitDecision struct {
	Run        bool
	NotBefore  time.Time
	Reason     string
	Ticket     any
	RenewEvery time.Duration
	HoldFor    time.Duration
	HeldUntil  time.Time
}

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
	e      *Engine
	it     *item
	r      LimitRenewer
	every  time.Duration
	hold   time.Duration // 0: no local lease
	margin time.Duration
	// timer starts the renewals when the first is due, then (with hold)
	// fences the lease: it fires at until and ends it unless a renewal
	// moved until (tick). One timer per lease, not two, and armed only
	// when the first is near (leasewatch.go): most tasks end before either
	// would fire, and each costs its creation and its Stop.
	timer   *time.Timer
	started bool // the renewals run
	ctx     context.Context
	first   time.Time // when the timer is due at first (arm)
	// in the engine's leaseWatch until its timer is armed (under its mu)
	bucket     *leaseBucket
	prev, next *limitLease

	done chan struct{} // made when the renewals start (tick), closed by stop
	wg   sync.WaitGroup
	once sync.Once

	mu      sync.Mutex
	until   time.Time   // the lease's end (with hold)
	lost    error       // why it was lost; nil while held
	running *handlerCtx // the running handler's context; nil while none runs
	stopped bool
}

// renewLimit starts the lease of what an admitted item holds when the
// Limiter is a LimitRenewer (see limitLease) and sets it.lease, whose stop
// ends the renewals and waits for one in flight (it may be called more
// than once, and on a nil lease).
func (e *Engine) renewLimit(ctx context.Context, it *item) {
	r, ok := e.cfg.Limiter.(LimitRenewer)
	every := it.dec.RenewEvery
	if !ok || every <= 0 || !it.dec.Run {
		return
	}
	now := time.Now()
	l := &limitLease{e: e, it: it, r: r, every: every, ctx: ctx}
	// The renewals start once the first is due: most tasks end sooner, and
	// a goroutine and a ticker per admitted task cost a no-op handler's
	// worker a tenth of its CPU (BenchmarkKeyLimits' profile).
	first := every
	if hold := it.dec.HoldFor; hold > 0 {
		l.hold, l.margin = hold, leaseMargin(hold)
		until := it.dec.HeldUntil
		if until.IsZero() {
			until = now.Add(hold)
		}
		l.until = until.Add(-l.margin)
		first = min(first, l.until.Sub(now))
	}
	it.lease = l
	l.first = now.Add(first)
	if first >= 2*leaseGrain {
		e.leases.add(l, first)
		return
	}
	l.arm()
}

// arm sets the lease's timer for l.first, unless it stopped.
func (l *limitLease) arm() {
	l.mu.Lock() // tick, which may run at once, reads l.timer under mu
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.timer = time.AfterFunc(time.Until(l.first), l.fire)
}

// fire runs tick when the timer fires.
func (l *limitLease) fire() { l.tick(l.ctx) }

// renew renews the hold now, then every l.every until stop, ctx's end or
// the hold's loss.
func (l *limitLease) renew(ctx context.Context) {
	met, it := l.e.met, l.it
	t := time.NewTicker(l.every)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-l.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if l.isLost() || ctx.Err() != nil {
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
		l.until = u // the timer, when it fires, arms itself again (tick)
	}
}

// tick runs when the timer fires: the first time it starts the renewals;
// with a local lease it then loses the lease if its end passed without a
// renewal, or arms the timer for the end the last renewal set.
func (l *limitLease) tick(ctx context.Context) {
	l.mu.Lock()
	if l.lost != nil || l.stopped {
		l.mu.Unlock()
		return
	}
	if !l.started {
		l.started, l.done = true, make(chan struct{})
		l.wg.Go(func() { l.renew(ctx) }) // under mu: stop's Wait sees it
	}
	if l.hold <= 0 {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.until); d > 0 {
		l.timer.Reset(d)
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
	running := l.running
	l.mu.Unlock()
	if running != nil {
		running.endCause(l.lost)
	}
	l.e.met.slotsLost.WithLabelValues(reason).Inc()
	msg := "rate-limit slot lost while its task waited for a handler slot; the handler will not run"
	if running != nil {
		msg = "rate-limit slot lost; cancelling the handler (another task may take the slot)"
	}
	l.it.log.Warn(msg, "type", l.it.t.Type, "reason", reason, "why", why)
}

// stop ends the renewals and the fence, and waits for a renewal in
// flight. A nil lease has nothing to stop.
func (l *limitLease) stop() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.e.leases.remove(l)
		l.mu.Lock()
		l.stopped = true
		done, timer := l.done, l.timer
		l.mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
		if done != nil {
			close(done)
		}
		l.wg.Wait()
	})
}

// call runs handler h for x under hctx, fenced by the lease l (nil: no
// lease, h runs under hctx): hctx is cancelled with l's loss as its cause
// (handlerCtx.endCause) when the lease is lost while h runs, and h's error
// then wraps it; a lease lost before h starts fails the run without
// calling h. (A context of its own per task cost ~0.7 µs of a worker's
// CPU per admitted task: BenchmarkKeyLimits' profile.)
func (l *limitLease) call(hctx *handlerCtx, log *slog.Logger, h HandlerFunc, x *Execution) error {
	if l == nil {
		return call(hctx, log, h, x)
	}
	l.mu.Lock()
	lost := l.lost
	if lost == nil {
		l.running = hctx
	}
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	err := call(hctx, log, h, x)
	l.mu.Lock()
	l.running, lost = nil, l.lost
	l.mu.Unlock()
	if lost != nil && err != nil && !errors.Is(err, ErrLimitSlotLost) {
		err = fmt.Errorf("%w: %w", lost, err)
	}
	return err
}
