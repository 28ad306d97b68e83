package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Two workers in one group share a stream of fired tasks; each task runs
// exactly once and ends succeeded. Prints the end-to-end lag (handler start
// minus due time; includes the test firer's 10ms polling).
func TestTwoWorkersRunEachTaskOnce(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	var ws []*running
	for _, name := range []string{"w1", "w2"} {
		cfg, reg := e.config(t, name)
		ws = append(ws, start(t, cfg, reg, func(w *worker.Worker) {
			w.Handle("order.cancel", func(ctx context.Context, tk *worker.Task) error {
				led.record(name, tk)
				return nil
			})
		}))
	}
	e.Firer.Start(t)

	const n = 400
	var ids []string
	for i := range n {
		id := fmt.Sprintf("order-%d", i)
		ids = append(ids, id)
		worktest.Schedule(t, e.Store, newTask(id, "order.cancel"))
		if i%50 == 49 {
			time.Sleep(20 * time.Millisecond) // a stream, not one burst
		}
	}
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
	testenv.WaitFor(t, 5*time.Second, "all runs recorded", func() bool { return led.distinct() == n })
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	if led.byWork["w1"] == 0 || led.byWork["w2"] == 0 {
		t.Errorf("one worker did nothing: %v", led.byWork)
	}
	p50, p99, mx := led.lagPercentiles()
	t.Logf("e2e lag over %d tasks (due -> handler start, 10ms firer poll included): p50 %v p99 %v max %v; per worker %v",
		n, p50.Round(time.Millisecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), led.byWork)
	for _, r := range ws {
		if got := r.handled(t, "succeeded"); got == 0 {
			t.Errorf("metric succeeded = %v", got)
		}
	}
}

// Handler outcomes: retries with growing delays, RetryAfter, Permanent,
// exhausted attempts, panics and timeouts; dead tasks are in the dead topic
// and the dead set with their last error, and a redriven one succeeds.
func TestOutcomes(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	var mu sync.Mutex
	fixed := map[string]bool{} // redriven tasks succeed
	cfg, reg := e.config(t, "w1")
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			n := led.record("w1", tk)
			mu.Lock()
			ok := fixed[tk.ID]
			mu.Unlock()
			if ok {
				return nil
			}
			if n != tk.Attempt {
				t.Errorf("%s: run %d has attempt %d", tk.ID, n, tk.Attempt)
			}
			switch tk.Type {
			case "flaky": // fails twice, then succeeds
				if tk.Attempt <= 2 {
					return fmt.Errorf("flaky attempt %d: %w", tk.Attempt, errBoom)
				}
			case "perm":
				return worker.Permanent(errors.New("bad request: no such order"))
			case "exhaust":
				return fmt.Errorf("still down (attempt %d)", tk.Attempt)
			case "panic":
				if tk.Attempt == 1 {
					panic("nil map")
				}
			case "slow": // times out once (slowdead: its only attempt)
				if tk.Attempt == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
			case "after":
				if tk.Attempt == 1 {
					return worker.RetryAfter(400*time.Millisecond, errors.New("429"))
				}
			}
			return nil
		})
	})
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) })
	defer func() { cancel(); fg.Wait() }()

	mk := func(id, typ string, maxAttempts int, timeout time.Duration) *task.Task {
		tk := newTask(id, typ)
		tk.MaxAttempts, tk.Timeout = maxAttempts, timeout
		return tk
	}
	worktest.Schedule(t, e.Store,
		mk("flaky-1", "flaky", 5, 0), mk("flaky-2", "flaky", 5, 0),
		mk("perm-1", "perm", 5, 0),
		mk("exhaust-1", "exhaust", 3, 0),
		mk("panic-1", "panic", 5, 0),
		mk("slow-1", "slow", 5, 300*time.Millisecond),
		mk("slowdead-1", "slow", 1, 200*time.Millisecond),
		mk("after-1", "after", 5, 0),
	)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, "flaky-1", "flaky-2", "panic-1", "slow-1", "after-1")
	e.WaitState(t, 30*time.Second, task.StateDead, "perm-1", "exhaust-1", "slowdead-1")

	want := map[string]int{"slowdead-1": 1, "flaky-1": 3, "flaky-2": 3, "perm-1": 1, "exhaust-1": 3, "panic-1": 2, "slow-1": 2, "after-1": 2}
	for id, n := range want {
		if got := led.count(id); got != n {
			t.Errorf("%s ran %d times, want %d", id, got, n)
		}
	}
	// the delay chosen after attempt n: the next attempt's due time (Redis'
	// clock + delay) minus when attempt n ran
	led.mu.Lock()
	fl, fd := led.runs["flaky-1"], led.dues["flaky-1"]
	d1, d2 := fd[1].Sub(fl[0]), fd[2].Sub(fl[1])
	af, ad := led.runs["after-1"], led.dues["after-1"]
	da := ad[1].Sub(af[0])
	led.mu.Unlock()
	t.Logf("flaky-1 retry delays: %v, %v (backoff min 100ms, jitter 0.2); after-1: %v (RetryAfter 400ms)", d1, d2, da)
	if d2 <= d1 {
		t.Errorf("delays do not grow: %v then %v", d1, d2)
	}
	if da < 398*time.Millisecond || da > 450*time.Millisecond || af[1].Before(ad[1]) {
		t.Errorf("RetryAfter 400ms: due after %v (ms precision), ran at %v", da, af[1].Sub(af[0]))
	}

	dead, err := e.Store.ListDead(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	lastErr := map[string]string{}
	for _, d := range dead {
		lastErr[d.Task.ID] = d.Task.LastError
	}
	if !strings.Contains(lastErr["perm-1"], "no such order") || !strings.Contains(lastErr["exhaust-1"], "attempt 3") ||
		!strings.Contains(lastErr["slowdead-1"], "timed out after 200ms") {
		t.Errorf("dead set last errors: %q", lastErr)
	}
	tk, _ := e.Store.Get(t.Context(), "slow-1")
	if tk.Attempt != 2 {
		t.Errorf("slow-1 attempt %d", tk.Attempt)
	}
	recs := worktest.ReadTopic(t, e.Kafka, "dq.dead", 3, 10*time.Second)
	for _, rec := range recs {
		id, _ := testenv.Header(rec, "dq-id")
		why, _ := testenv.Header(rec, "dq-error")
		att, _ := testenv.Header(rec, "dq-attempt")
		want := map[string][2]string{"perm-1": {"no such order", "1"}, "exhaust-1": {"attempt 3", "3"},
			"slowdead-1": {"timed out", "1"}}[id]
		if !strings.Contains(why, want[0]) || att != want[1] || string(rec.Value) != `{"id":"`+id+`"}` {
			t.Errorf("dead letter %s: dq-error %q dq-attempt %q value %q", id, why, att, rec.Value)
		}
	}

	// flaky 2×2, exhaust 2, panic 1, slow 1, after 1
	if got := r.handled(t, "retry"); got != 9 {
		t.Errorf("retries: %v", got)
	}

	// redrive: the fixed task succeeds
	mu.Lock()
	fixed["exhaust-1"] = true
	mu.Unlock()
	if _, err := e.Store.Redrive(t.Context(), "exhaust-1"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "exhaust-1")
	if got := led.count("exhaust-1"); got != 4 {
		t.Errorf("exhaust-1 ran %d times after redrive, want 4", got)
	}
}
