package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// pauseView is a worker.PauseView the test steers.
type pauseView struct {
	mu     sync.Mutex
	paused map[string]bool
	synced bool
}

func newPauseView(types ...string) *pauseView {
	v := &pauseView{paused: map[string]bool{}, synced: true}
	for _, typ := range types {
		v.paused[typ] = true
	}
	return v
}

func (v *pauseView) Paused(typ string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.paused[typ]
}

func (v *pauseView) Synced() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.synced
}

func (v *pauseView) set(typ string, paused bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.paused[typ] = paused
}

// newEnvOneShard is an env with one shard and one partition: the event
// side fires a shard's due tasks in due order, and the partition keeps
// that order.
func newEnvOneShard(t *testing.T) *env {
	t.Helper()
	e := &worktest.Env{Redis: testenv.StartRedis(t), Kafka: testenv.StartKafkaPartitions(t, 1, task.DefaultTopic, "dq.dead")}
	worktest.FastGroups(t, e.Kafka)
	e.RDB = e.Redis.Client(t)
	e.NS = fmt.Sprintf("t%d", rand.Uint32())
	e.Group = "g-" + e.NS
	var err error
	if e.Store, err = redisstore.New(t.Context(), e.RDB, redisstore.Options{Namespace: e.NS, Shards: 1}); err != nil {
		t.Fatal(err)
	}
	e.Firer = &worktest.Firer{Store: e.Store, Writer: worktest.NewWriter(t, e.Kafka.Brokers)}
	return &env{e}
}

// stays checks that cond holds for d (what must not happen does not).
func stays(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	end := time.After(d)
	for {
		if !cond() {
			t.Fatalf("%s: no longer true", what)
		}
		select {
		case <-end:
			return
		case <-tick.C:
		}
	}
}

// Tasks of a paused type wait parked (no attempt used, their handler never
// called) while other types run; once the type is resumed and unparked (as
// the daemon's resume does), they are fired again in due order and each
// runs exactly once, at its first attempt, with its due time kept.
func TestPauseParksTasksUntilResumed(t *testing.T) {
	e := newEnvOneShard(t)
	view := newPauseView("report")
	cfg, reg := e.config(t, "w1")
	cfg.Shards = 1
	cfg.Pause, cfg.PauseReconcile = view, 50*time.Millisecond
	led := newLedger()
	var mu sync.Mutex
	attempts := map[string]int{}
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("report", func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			mu.Lock()
			defer mu.Unlock()
			attempts[tk.ID] = tk.Attempt
			return nil
		})
		w.Handle("mail", func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			return nil
		})
	})

	// reports due in the past, in an order their ids do not have
	now := time.Now().Truncate(time.Millisecond)
	const n = 12
	var reports, byDue []string
	due := map[string]time.Time{}
	for i := range n {
		id := fmt.Sprintf("report-%02d", (i*5)%n)
		tk := newTask(id, "report")
		tk.DueAt = now.Add(-time.Duration(n-i) * time.Second)
		due[id] = tk.DueAt
		byDue = append(byDue, id)
		worktest.Schedule(t, e.Store, tk)
	}
	reports = slices.Sorted(slices.Values(byDue))
	var mails []string
	for i := range 5 {
		id := fmt.Sprintf("mail-%d", i)
		mails = append(mails, id)
		worktest.Schedule(t, e.Store, newTask(id, "mail"))
	}
	fired := e.Kafka.Collect(t, task.DefaultTopic)
	e.Firer.Start(t)

	e.WaitState(t, 20*time.Second, task.StateSucceeded, mails...)
	e.WaitState(t, 20*time.Second, task.StatePaused, reports...)
	for _, id := range reports {
		tk, err := e.Store.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Attempt != 1 || !tk.DueAt.Equal(due[id]) {
			t.Errorf("parked %s: attempt %d due %v, want attempt 1 due %v", id, tk.Attempt, tk.DueAt, due[id])
		}
	}
	if got := metricSum(t, reg, "delayq_work_parked_total", map[string]string{"type": "report"}); got != n {
		t.Errorf("delayq_work_parked_total{type=report} = %v, want %d", got, n)
	}
	// parked: not fired again, not run, while the reconciler passes
	stays(t, 500*time.Millisecond, "reports parked, none run", func() bool {
		for _, id := range reports {
			if led.count(id) != 0 {
				return false
			}
		}
		return true
	})
	// the records were finished: their offsets are committed
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { return e.committedTotal(t) == n+5 })

	// the resume: the type is no longer paused, and its tasks are
	// unparked (the daemon's resume; here the test's). The worker's
	// reconciler (every 50 ms) unparks a type it sees resumed too, and may
	// come first: between the two, every parked task moves exactly once
	view.set("report", false)
	moved, err := e.Store.Unpark(t.Context(), "report")
	if err != nil {
		t.Fatalf("Unpark: %v", err)
	}
	reconciled := func() int {
		return int(metricSum(t, reg, "delayq_work_pause_reconcile_unparked_total", nil))
	}
	testenv.WaitFor(t, 5*time.Second, "every parked task unparked", func() bool { return moved+reconciled() >= n })
	if got := moved + reconciled(); got != n {
		t.Fatalf("unparked %d (resume %d, reconciler %d), want %d", got, moved, got-moved, n)
	}
	e.WaitState(t, 20*time.Second, task.StateSucceeded, reports...)
	testenv.WaitFor(t, 5*time.Second, "every run recorded", func() bool { return led.distinct() == n+5 })
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	// fired in due order when first due, and again after the resume
	var order []string
	testenv.WaitFor(t, 5*time.Second, "every firing collected", func() bool {
		order = order[:0]
		for _, rec := range fired.All() {
			id, _ := testenv.Header(rec, record.HeaderID)
			if _, ok := due[id]; ok {
				order = append(order, id)
			}
		}
		return len(order) >= 2*n
	})
	if want := append(slices.Clone(byDue), byDue...); !slices.Equal(order, want) {
		t.Errorf("fired in the order %v, want the due order twice %v", order, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range reports {
		if attempts[id] != 1 {
			t.Errorf("%s ran as attempt %d, want 1", id, attempts[id])
		}
		if ds := led.dues[id]; len(ds) != 1 || !ds[0].Equal(due[id]) {
			t.Errorf("%s ran with due %v, want %v", id, ds, due[id])
		}
	}
	if got := r.handled(t, "parked"); got != n {
		t.Errorf("handled{outcome=parked} = %v, want %d", got, n)
	}
}

// A resume that races a park (the daemon unparked the type before a worker
// that still saw it paused parked more of its tasks) is repaired by the
// reconciler, which leaves types still paused alone.
func TestPauseReconcilerRepairsParkAfterResume(t *testing.T) {
	e := newEnv(t)
	view := newPauseView("report", "invoice")
	cfg, reg := e.config(t, "w1")
	cfg.Pause, cfg.PauseReconcile = view, 50*time.Millisecond
	led := newLedger()
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			return nil
		})
	})
	var reports, invoices []string
	for i := range 20 {
		reports = append(reports, fmt.Sprintf("report-%d", i))
		invoices = append(invoices, fmt.Sprintf("invoice-%d", i))
		worktest.Schedule(t, e.Store, newTask(reports[i], "report"), newTask(invoices[i], "invoice"))
	}
	e.Firer.Start(t)
	e.WaitState(t, 20*time.Second, task.StatePaused, reports...)
	e.WaitState(t, 20*time.Second, task.StatePaused, invoices...)

	// resumed, but nobody unparks: the reconciler must
	view.set("report", false)
	e.WaitState(t, 20*time.Second, task.StateSucceeded, reports...)
	testenv.WaitFor(t, 5*time.Second, "every run recorded", func() bool { return led.distinct() == len(reports) })
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	if got := metricSum(t, reg, "delayq_work_pause_reconcile_unparked_total", nil); got != float64(len(reports)) {
		t.Errorf("reconcile unparked %v, want %d", got, len(reports))
	}
	// the reconciler passes again and again: invoices stay parked
	stays(t, 300*time.Millisecond, "invoices parked", func() bool {
		for _, id := range invoices {
			if led.count(id) != 0 {
				return false
			}
		}
		return true
	})
	parked, err := e.Store.ParkedTypes(t.Context())
	if err != nil || parked["invoice"] != int64(len(invoices)) || parked["report"] != 0 {
		t.Fatalf("ParkedTypes: %v %v", parked, err)
	}

	// a view that is not synced unparks nothing
	view.mu.Lock()
	view.synced = false
	view.paused["invoice"] = false
	view.mu.Unlock()
	stays(t, 300*time.Millisecond, "invoices parked while the view is not synced", func() bool {
		for _, id := range invoices {
			if led.count(id) != 0 {
				return false
			}
		}
		return true
	})
	view.mu.Lock()
	view.synced = true
	view.mu.Unlock()
	e.WaitState(t, 20*time.Second, task.StateSucceeded, invoices...)
}

// An embedded worker with NewLivePause follows the pause state in etcd:
// a type paused there is parked; resumed there (nobody unparks), its
// tasks run once each through the reconciler.
func TestPauseLiveFromEtcd(t *testing.T) {
	e := newEnv(t)
	cli := testenv.StartEtcd(t).Client(t)
	if _, err := pause.Pause(t.Context(), cli, e.NS, "report"); err != nil {
		t.Fatal(err)
	}
	cfg, reg := e.config(t, "w1")
	live, err := worker.NewLivePause(cli, worker.LivePauseOptions{Namespace: e.NS, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pause, cfg.PauseReconcile = live, 50*time.Millisecond
	led := newLedger()
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			return nil
		})
	})
	select {
	case <-live.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("pause state not listed")
	}
	var reports []string
	for i := range 10 {
		reports = append(reports, fmt.Sprintf("report-%d", i))
		worktest.Schedule(t, e.Store, newTask(reports[i], "report"))
	}
	worktest.Schedule(t, e.Store, newTask("mail-1", "mail"))
	e.Firer.Start(t)
	e.WaitState(t, 20*time.Second, task.StateSucceeded, "mail-1")
	e.WaitState(t, 20*time.Second, task.StatePaused, reports...)

	if _, err := pause.Resume(t.Context(), cli, e.NS, "report"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, 20*time.Second, task.StateSucceeded, reports...)
	testenv.WaitFor(t, 5*time.Second, "every run recorded", func() bool { return led.distinct() == len(reports)+1 })
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
}
