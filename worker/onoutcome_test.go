package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// outcomeLog keeps what Config.OnOutcome reported.
type outcomeLog struct {
	mu   sync.Mutex
	all  []worker.Outcome
	byID map[string][]worker.Outcome
}

func (l *outcomeLog) add(o worker.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, o)
	l.byID[o.Task.ID] = append(l.byID[o.Task.ID], o)
}

func (l *outcomeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// OnOutcome reports every stored outcome once, after it is in Redis:
// succeeded, each failed attempt that is retried (with its retry delay)
// and dead (permanent, or out of attempts); a panicking callback is
// recovered and handling goes on.
func TestOnOutcome(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	log := &outcomeLog{byID: map[string][]worker.Outcome{}}
	cfg.OnOutcome = func(o worker.Outcome) {
		// the outcome is stored by the time we are called
		tk, err := e.Store.Get(context.WithoutCancel(t.Context()), o.Task.ID)
		want := map[worker.OutcomeKind]task.State{worker.OutcomeSucceeded: task.StateSucceeded,
			worker.OutcomeDead: task.StateDead, worker.OutcomeFailed: task.StateRetrying}[o.Kind]
		if err != nil || tk.State != want || tk.Shard != o.Shard {
			t.Errorf("%s %s: stored state %s shard %d, err %v (reported shard %d)", o.Task.ID, o.Kind, tk.State, tk.Shard, err, o.Shard)
		}
		log.add(o)
		if o.Task.ID == "panic-1" {
			panic("callback bug")
		}
	}
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			switch {
			case strings.HasPrefix(tk.ID, "flaky-") && tk.Attempt <= 2:
				return fmt.Errorf("flaky attempt %d", tk.Attempt)
			case strings.HasPrefix(tk.ID, "perm-"):
				return worker.Permanent(errors.New("no such order"))
			case strings.HasPrefix(tk.ID, "exhaust-"):
				return errors.New("still down")
			}
			return nil
		})
	})
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) })
	defer func() { cancel(); fg.Wait() }()

	mk := func(id string, maxAttempts int) *task.Task {
		tk := newTask(id, "order")
		tk.MaxAttempts = maxAttempts
		tk.Headers = map[string]string{"tenant": "acme"}
		return tk
	}
	worktest.Schedule(t, e.Store, mk("ok-1", 3), mk("panic-1", 3), mk("after-panic-1", 3), mk("flaky-1", 5),
		mk("perm-1", 5), mk("exhaust-1", 2))
	e.WaitState(t, 30*time.Second, task.StateSucceeded, "ok-1", "panic-1", "after-panic-1", "flaky-1")
	e.WaitState(t, 30*time.Second, task.StateDead, "perm-1", "exhaust-1")
	// ok, panic, after-panic: 1 each; flaky 2 failed + 1; perm 1; exhaust 1 failed + 1
	testenv.WaitFor(t, 5*time.Second, "9 outcomes", func() bool { return log.count() >= 9 })

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.all) != 9 {
		t.Errorf("%d outcomes, want 9", len(log.all))
	}
	type want struct {
		kinds    []worker.OutcomeKind
		attempts []int
		err      string
	}
	wants := map[string]want{
		"ok-1":          {[]worker.OutcomeKind{worker.OutcomeSucceeded}, []int{1}, ""},
		"panic-1":       {[]worker.OutcomeKind{worker.OutcomeSucceeded}, []int{1}, ""},
		"after-panic-1": {[]worker.OutcomeKind{worker.OutcomeSucceeded}, []int{1}, ""},
		"flaky-1":       {[]worker.OutcomeKind{worker.OutcomeFailed, worker.OutcomeFailed, worker.OutcomeSucceeded}, []int{1, 2, 3}, ""},
		"perm-1":        {[]worker.OutcomeKind{worker.OutcomeDead}, []int{1}, "no such order"},
		"exhaust-1":     {[]worker.OutcomeKind{worker.OutcomeFailed, worker.OutcomeDead}, []int{1, 2}, "still down"},
	}
	for id, w := range wants {
		got := log.byID[id]
		if len(got) != len(w.kinds) {
			t.Errorf("%s: %d outcomes, want %d", id, len(got), len(w.kinds))
			continue
		}
		for i, o := range got {
			if o.Kind != w.kinds[i] || o.Task.Attempt != w.attempts[i] || o.Task.Headers["tenant"] != "acme" ||
				o.Task.Type != "order" || o.Duration < 0 || o.Finished.Before(o.Started) {
				t.Errorf("%s #%d: %s attempt %d, want %s attempt %d (%+v)", id, i, o.Kind, o.Task.Attempt, w.kinds[i], w.attempts[i], o)
			}
			switch o.Kind {
			case worker.OutcomeSucceeded:
				if o.Err != nil || o.RetryIn != 0 {
					t.Errorf("%s: succeeded with err %v retry %v", id, o.Err, o.RetryIn)
				}
			case worker.OutcomeFailed:
				if o.Err == nil || o.RetryIn <= 0 {
					t.Errorf("%s: failed with err %v retry %v", id, o.Err, o.RetryIn)
				}
			case worker.OutcomeDead:
				if o.Err == nil || !strings.Contains(o.Err.Error(), w.err) {
					t.Errorf("%s: dead with err %v", id, o.Err)
				}
			}
		}
	}
}

// Kafka down for outcomes does not hold handling back: with the outcome
// publisher's broker hanging (a listener that never answers) and a tiny
// queue, every task still succeeds; what the queue cannot hold is dropped
// and counted.
func TestOnOutcomePublisherKafkaDownDoesNotBlock(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	var held []net.Conn
	var hmu sync.Mutex
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	})
	defer func() {
		_ = ln.Close()
		conns.Wait()
		hmu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		hmu.Unlock()
	}()
	preg := prometheus.NewRegistry()
	pub, err := outcome.New(t.Context(), outcome.Config{Brokers: []string{ln.Addr().String()}, Topic: "hang.outcomes",
		Queue: 4, WriteTimeout: time.Minute, Registerer: preg})
	if err != nil {
		t.Fatal(err)
	}
	cfg, reg := e.config(t, "w1")
	cfg.OnOutcome = func(o worker.Outcome) {
		pub.Publish(record.OutcomeRecord{ID: o.Task.ID, Type: o.Task.Type, Outcome: string(o.Kind),
			Attempt: o.Task.Attempt, MaxAttempts: o.Task.MaxAttempts, FinishedAt: o.Finished, Shard: o.Shard})
	}
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { return nil })
	})
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) })
	defer func() { cancel(); fg.Wait() }()
	var ids []string
	var tasks []*task.Task
	for i := range 100 {
		id := fmt.Sprintf("t-%d", i)
		ids = append(ids, id)
		tasks = append(tasks, newTask(id, "x"))
	}
	worktest.Schedule(t, e.Store, tasks...)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
	r.stop()
	cctx, ccancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer ccancel()
	if err := pub.Close(cctx); err != nil {
		t.Fatal(err)
	}
	full := metricSum(t, preg, "delayq_outcomes_dropped_total", map[string]string{"reason": "queue_full"})
	all := metricSum(t, preg, "delayq_outcomes_dropped_total", nil)
	pubd := metricSum(t, preg, "delayq_outcomes_published_total", nil)
	if full == 0 || all != 100 || pubd != 0 {
		t.Errorf("dropped queue_full %v, dropped in all %v, published %v; want all 100 dropped, some for a full queue", full, all, pubd)
	}
}
