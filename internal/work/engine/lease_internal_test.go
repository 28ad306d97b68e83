package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/internal/task"
)

// scriptedRenewer is a LimitRenewer whose Renew answers from a script:
// "ok" (held), "gone" (not held), "stall" (blocks until the test ends,
// whatever its context says: a hung connection, a paused store); past the
// script's end it repeats the last answer.
type scriptedRenewer struct {
	mu      sync.Mutex
	answers []string
	calls   []time.Time
	release chan struct{}
}

func (r *scriptedRenewer) Admit(context.Context, []LimitItem) ([]LimitDecision, error) {
	return nil, errors.New("not used")
}

func (r *scriptedRenewer) Done(context.Context, LimitItem, LimitDecision) {}

func (r *scriptedRenewer) Renew(ctx context.Context, _ LimitItem, _ LimitDecision) (bool, error) {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	a := r.answers[min(len(r.calls), len(r.answers))-1]
	r.mu.Unlock()
	switch a {
	case "ok":
		return true, nil
	case "gone":
		return false, nil
	}
	<-r.release
	return false, ctx.Err()
}

// leaseRun is one run of a handler under a lease, driven by fake time.
type leaseRun struct {
	e        *Engine
	it       *item
	ren      *scriptedRenewer
	admitted time.Time // when the (simulated) Admit was sent
	called   bool      // the handler was called
	cancelAt time.Duration
	cause    error
	err      error // execute's
}

const (
	leaseTTL   = time.Second
	leaseEvery = leaseTTL / 3
)

// runLeased admits an item with a one-second slot at fake time 0 (as
// LiveLimits does: HoldFor the slot TTL, HeldUntil the Admit call's time
// plus it), waits wait for a handler slot, then runs a handler that works
// for work or until its context ends.
func runLeased(t *testing.T, answers []string, wait, work time.Duration) *leaseRun {
	t.Helper()
	ren := &scriptedRenewer{answers: answers, release: make(chan struct{})}
	e := &Engine{cfg: Config{Limiter: ren}, met: newMetrics(nil, 10), log: slog.New(slog.DiscardHandler)}
	r := &leaseRun{e: e, ren: ren, admitted: time.Now(), cancelAt: -1}
	handler := HandlerFunc(func(ctx context.Context, _ *Execution) error {
		r.called = true
		select {
		case <-time.After(work):
			return nil
		case <-ctx.Done():
			r.cancelAt, r.cause = time.Since(r.admitted), context.Cause(ctx)
			return ctx.Err()
		}
	})
	e.cfg.Handler = func(typ string) HandlerFunc {
		if typ == "conv" {
			return handler
		}
		return nil
	}
	r.it = &item{t: &task.Task{ID: "a", Type: "conv"}, log: slog.New(slog.DiscardHandler),
		dec: LimitDecision{Run: true, RenewEvery: leaseEvery, HoldFor: leaseTTL, HeldUntil: r.admitted.Add(leaseTTL)}}
	ctx := t.Context()
	e.renewLimit(ctx, r.it)
	defer r.it.lease.stop()
	time.Sleep(wait)
	ht := newHandlerTimer(ctx)
	defer ht.stop()
	_, r.err = e.execute(ctx, ht, r.it.log, &Execution{ID: "a", Type: "conv", Timeout: time.Minute}, time.Now(), r.it.lease, nil)
	close(ren.release) // a stalled renewal returns: stop waits for it
	r.it.lease.stop()
	return r
}

func (r *leaseRun) lost(reason string) float64 {
	return counterValue(r.e.met.slotsLost.WithLabelValues(reason))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// Issue 40 item 9: a holder whose renewals stall (a paused process, a
// hung Redis) must give its slot up before the slot can expire in the
// store, where a second task could take it: its handler's context is
// cancelled with ErrLimitSlotLost at the last confirmed renewal (here the
// admission) plus the TTL less the margin — before HeldUntil.
func TestLeaseFencesHandlerWhenRenewalsStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runLeased(t, []string{"stall"}, 0, time.Hour)
		want := leaseTTL - leaseMargin(leaseTTL)
		if r.cancelAt != want {
			t.Fatalf("handler cancelled at %v, want %v (the lease less its margin)", r.cancelAt, want)
		}
		if !r.admitted.Add(r.cancelAt).Before(r.it.dec.HeldUntil) {
			t.Fatal("cancelled after the slot could expire in the store")
		}
		if !errors.Is(r.cause, ErrLimitSlotLost) {
			t.Fatalf("cause %v, want ErrLimitSlotLost", r.cause)
		}
		if !errors.Is(r.err, ErrLimitSlotLost) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("run error %v, want ErrLimitSlotLost wrapping the handler's error (a failed attempt)", r.err)
		}
		if n := r.lost(slotExpired); n != 1 {
			t.Fatalf("slots lost (expired) %v, want 1", n)
		}
	})
}

// Confirmed renewals carry the lease on, each from the moment it was
// called; once they stall the handler is fenced one lease after the last
// confirmed one.
func TestLeaseRenewalsExtendThenStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runLeased(t, []string{"ok", "ok", "ok", "stall"}, 0, time.Hour)
		last := 3 * leaseEvery // the third renewal, the last confirmed
		if want := last + leaseTTL - leaseMargin(leaseTTL); r.cancelAt != want {
			t.Fatalf("handler cancelled at %v, want %v", r.cancelAt, want)
		}
		if !errors.Is(r.cause, ErrLimitSlotLost) || !errors.Is(r.err, ErrLimitSlotLost) {
			t.Fatalf("cause %v, error %v", r.cause, r.err)
		}
	})
}

// A renewal that finds the slot gone fences the handler at once.
func TestLeaseFencesHandlerWhenSlotGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runLeased(t, []string{"ok", "gone"}, 0, time.Hour)
		if r.cancelAt != 2*leaseEvery {
			t.Fatalf("handler cancelled at %v, want %v (the renewal that found the slot gone)", r.cancelAt, 2*leaseEvery)
		}
		if !errors.Is(r.cause, ErrLimitSlotLost) || !errors.Is(r.err, ErrLimitSlotLost) {
			t.Fatalf("cause %v, error %v", r.cause, r.err)
		}
		if g, e := r.lost(slotGone), r.lost(slotExpired); g != 1 || e != 0 {
			t.Fatalf("slots lost: gone %v, expired %v; want 1 and 0", g, e)
		}
		if n := counterValue(r.e.met.slotRenewals.WithLabelValues("lost")); n != 1 {
			t.Fatalf("renewals lost %v, want 1", n)
		}
	})
}

// A handler whose renewals succeed runs as long as it needs, unfenced.
func TestLeaseHeldWhileRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runLeased(t, []string{"ok"}, 0, 10*leaseTTL)
		if r.err != nil || r.cancelAt >= 0 {
			t.Fatalf("renewed handler: error %v, cancelled at %v", r.err, r.cancelAt)
		}
		if n := len(r.ren.calls); n < 29 {
			t.Fatalf("%d renewals in ten TTLs, want 30", n)
		}
		if n := r.lost(slotExpired) + r.lost(slotGone); n != 0 {
			t.Fatalf("%v slots lost", n)
		}
	})
}

// A slot lost while its task waited for a handler slot: the handler is
// not called, and the run fails with ErrLimitSlotLost (retried).
func TestLeaseLostBeforeHandlerStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := runLeased(t, []string{"stall"}, 2*leaseTTL, time.Millisecond)
		if r.called {
			t.Fatal("the handler ran without its slot")
		}
		if !errors.Is(r.err, ErrLimitSlotLost) {
			t.Fatalf("run error %v, want ErrLimitSlotLost", r.err)
		}
	})
}

// Leases of tasks that end before their first renewal is near wait in the
// engine's leaseWatch, without a timer of their own: a stopped lease
// leaves it at once (nothing kept per ended task; an empty bucket goes
// when its timer fires), and a lease still held
// when its grain comes gets its own timer, which renews it on time.
func TestLeaseWatchKeepsNoEndedTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ren := &scriptedRenewer{answers: []string{"ok"}, release: make(chan struct{})}
		e := &Engine{cfg: Config{Limiter: ren}, met: newMetrics(nil, 10), log: slog.New(slog.DiscardHandler)}
		ctx := t.Context()
		admit := func() *item {
			it := &item{t: &task.Task{ID: "a", Type: "conv"}, log: slog.New(slog.DiscardHandler),
				dec: LimitDecision{Run: true, RenewEvery: leaseEvery, HoldFor: leaseTTL, HeldUntil: time.Now().Add(leaseTTL)}}
			e.renewLimit(ctx, it)
			return it
		}
		buckets := func() (n, leases int) {
			e.leases.mu.Lock()
			defer e.leases.mu.Unlock()
			for _, b := range e.leases.buckets {
				for l := b.head; l != nil; l = l.next {
					leases++
				}
			}
			return len(e.leases.buckets), leases
		}
		var ended []*item
		for i := range 1000 {
			ended = append(ended, admit())
			if i%250 == 249 {
				time.Sleep(leaseGrain / 2) // spread over a few grains
			}
		}
		long := admit()
		if long.lease.timer != nil {
			t.Fatal("a lease whose first renewal is 333 ms away got a timer at once")
		}
		if b, n := buckets(); b < 2 || n != 1001 {
			t.Fatalf("%d buckets hold %d leases, want several holding 1001", b, n)
		}
		for _, it := range ended {
			it.lease.stop()
		}
		if _, n := buckets(); n != 1 {
			t.Fatalf("after 1000 stops: the buckets hold %d leases, want the long task's alone", n)
		}
		time.Sleep(leaseEvery + time.Millisecond)
		if b, n := buckets(); b != 0 || n != 0 {
			t.Fatalf("after its grain: %d buckets hold %d leases, want none", b, n)
		}
		synctest.Wait()
		if n := len(ren.calls); n != 1 {
			t.Fatalf("%d renewals once the first was due, want 1", n)
		}
		long.lease.stop()
		close(ren.release)
	})
}
