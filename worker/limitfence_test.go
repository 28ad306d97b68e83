package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Issue 40 item 9, with a real Redis: a worker whose link to the limits'
// Redis stops answering while a handler holds the type's only concurrency
// slot (slot_ttl 1s) must fence that handler before the slot expires and
// another process takes it. The second holder here is another Limiter on
// a direct link, as another worker would be; at the moment it gets the
// slot, the first handler's context must already be cancelled with
// ErrLimitSlotLost. The run counts as a failed attempt and is retried.
func TestLiveLimitsFenceHandlerWhenRenewalsBlocked(t *testing.T) {
	e := newEnv(t)
	cli := testenv.StartEtcd(t).Client(t)
	rules, err := ratelimit.NewRules(cli, e.NS, nil)
	if err != nil {
		t.Fatal(err)
	}
	rule := ratelimit.Rule{Concurrency: &ratelimit.Concurrency{Limit: 1, SlotTTL: ratelimit.Duration(time.Second)}}
	if err := rules.Put(t.Context(), "fenced", rule); err != nil {
		t.Fatal(err)
	}
	proxy, err := testenv.StartProxy("127.0.0.1:0", e.RDB.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = viaProxy.Close() })

	cfg, reg := e.config(t, "w1")
	live, err := worker.NewLiveLimits(cli, viaProxy, worker.LiveLimitsOptions{Namespace: e.NS, Registerer: reg, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limiter = live
	first := make(chan context.Context, 1)
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("fenced", func(ctx context.Context, tk *worker.Task) error {
			if tk.Attempt > 1 {
				return nil
			}
			first <- ctx
			<-ctx.Done() // a handler that honours its context
			return ctx.Err()
		})
	})
	select {
	case <-live.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("rules not listed")
	}
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, newTask("fenced-1", "fenced"))

	var hctx context.Context
	select {
	case hctx = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not start")
	}
	proxy.Partition(testenv.Hold) // the holder's renewals stop getting through

	other, err := ratelimit.NewLimiter(e.RDB, ratelimit.StaticRules{"fenced": rule}, ratelimit.Options{Namespace: e.NS})
	if err != nil {
		t.Fatal(err)
	}
	it := ratelimit.Item{ID: "other", Type: "fenced"}
	var taken ratelimit.Decision
	testenv.WaitFor(t, 10*time.Second, "the slot to expire for another holder", func() bool {
		ds, err := other.Admit(t.Context(), []ratelimit.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		taken = ds[0]
		return ds[0].Run
	})
	// the moment another holder has the slot: the first must be fenced
	if cause := context.Cause(hctx); !errors.Is(cause, worker.ErrLimitSlotLost) {
		t.Fatalf("another holder took the slot while the first handler still ran (its context's cause: %v)", cause)
	}
	if err := other.Done(t.Context(), it, taken); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()

	e.WaitState(t, 30*time.Second, task.StateSucceeded, "fenced-1")
	tk, err := e.Store.Get(t.Context(), "fenced-1")
	if err != nil || tk.Attempt != 2 {
		t.Fatalf("attempt %d (%v), want 2: the fenced run is a failed attempt, retried", tk.Attempt, err)
	}
	if n := metricSum(t, reg, "delayq_work_limit_slots_lost_total", map[string]string{"reason": "expired"}); n != 1 {
		t.Fatalf("%v slots lost (expired), want 1", n)
	}
}
