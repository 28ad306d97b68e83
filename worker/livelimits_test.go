package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// A rule written through the rules store (what /v1/limits and `dq limits`
// do) limits an embedded worker that uses NewLiveLimits, and the
// concurrency slot of a handler that runs three times the rule's slot_ttl
// is renewed: never two handlers of the type at once, though the worker
// could run eight.
func TestLiveLimitsRenewSlotsOfLongHandlers(t *testing.T) {
	e := newEnv(t)
	cli := testenv.StartEtcd(t).Client(t)
	rules, err := ratelimit.NewRules(cli, e.NS, nil)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second // the shortest slot_ttl a rule may have
	if err := rules.Put(t.Context(), "slow", ratelimit.Rule{
		Concurrency: &ratelimit.Concurrency{Limit: 1, SlotTTL: ratelimit.Duration(ttl)},
	}); err != nil {
		t.Fatal(err)
	}
	cfg, reg := e.config(t, "w1")
	live, err := worker.NewLiveLimits(cli, e.RDB, worker.LiveLimitsOptions{Namespace: e.NS, Registerer: reg, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limiter = live
	var mu sync.Mutex
	running, most := 0, 0
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("slow", func(ctx context.Context, tk *worker.Task) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			select {
			case <-time.After(3 * ttl):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	})
	select {
	case <-live.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("rules not listed")
	}
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) }) // fires deferred tasks again
	defer func() { cancel(); fg.Wait() }()
	ids := []string{"slow-a", "slow-b", "slow-c"}
	for _, id := range ids {
		worktest.Schedule(t, e.Store, newTask(id, "slow"))
	}
	e.WaitState(t, 40*time.Second, task.StateSucceeded, ids...)
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d handlers of a type limited to 1 ran at once", most)
	}
	if n := r.handled(t, "deferred"); n == 0 {
		t.Error("nothing was deferred by the rule")
	}
	if n := metricSum(t, reg, "delayq_work_limit_slot_renewals_total", map[string]string{"result": "ok"}); n < 2 {
		t.Errorf("%v slot renewals", n)
	}
	if n := metricSum(t, reg, "delayq_work_limit_slot_renewals_total", map[string]string{"result": "lost"}); n != 0 {
		t.Errorf("%v slots lost while their handler ran", n)
	}
}

// Run with live limits returns its start error (here a namespace written
// with another bucket layout) instead of waiting on the rules watch.
func TestLiveLimitsRunReturnsStartError(t *testing.T) {
	e := newEnv(t)
	cli := testenv.StartEtcd(t).Client(t)
	cfg, reg := e.config(t, "w1")
	// a namespace written with another bucket layout: the store refuses it
	if err := e.RDB.HSet(t.Context(), "dq:{"+e.NS+"}:meta", "buckets", "512").Err(); err != nil {
		t.Fatal(err)
	}
	live, err := worker.NewLiveLimits(cli, e.RDB, worker.LiveLimitsOptions{Namespace: e.NS, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limiter = live
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run started on a namespace with another bucket layout")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return its start error")
	}
}
