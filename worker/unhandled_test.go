package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// A task type without a handler: by default (UnhandledFail) the task is
// dead after its first attempt with a clear reason, in Redis, in its dead
// letter and in OnOutcome (a Permanent error); with UnhandledRetry it is
// retried with backoff until its last attempt. A handled type runs either
// way.
func TestUnhandledTypes(t *testing.T) {
	for _, tc := range []struct {
		policy            worker.Unhandled
		attempts, retries int
		permanent         bool
	}{
		{policy: worker.UnhandledFail, attempts: 1, retries: 0, permanent: true},
		{policy: worker.UnhandledRetry, attempts: 3, retries: 2, permanent: false},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			e := newEnv(t)
			cfg, reg := e.config(t, "w1")
			cfg.UnhandledTypes = tc.policy
			var mu sync.Mutex
			var dead []worker.Outcome
			cfg.OnOutcome = func(o worker.Outcome) {
				if o.Kind == worker.OutcomeDead {
					mu.Lock()
					dead = append(dead, o)
					mu.Unlock()
				}
			}
			r := start(t, cfg, reg, func(w *worker.Worker) {
				w.Handle("known", func(context.Context, *worker.Task) error { return nil })
			})
			e.Firer.Start(t)
			mystery := newTask("mystery-1", "mystery")
			mystery.MaxAttempts = 3
			worktest.Schedule(t, e.Store, mystery, newTask("known-1", "known"))
			e.WaitState(t, 20*time.Second, task.StateSucceeded, "known-1")
			e.WaitState(t, 20*time.Second, task.StateDead, "mystery-1")

			const why = `no handler for task type "mystery"`
			got, err := e.Store.Get(t.Context(), "mystery-1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Attempt != tc.attempts || got.LastError != why {
				t.Errorf("dead at attempt %d with %q, want attempt %d with %q", got.Attempt, got.LastError, tc.attempts, why)
			}
			if n := r.handled(t, "retry"); n != float64(tc.retries) {
				t.Errorf("retries %v, want %d", n, tc.retries)
			}
			testenv.WaitFor(t, 5*time.Second, "the dead outcome reported", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(dead) == 1
			})
			if o := dead[0]; o.Task.ID != "mystery-1" || o.Err == nil || o.Err.Error() != why || worker.IsPermanent(o.Err) != tc.permanent {
				t.Errorf("dead outcome %s: err %v (permanent %v), want %q (permanent %v)", o.Task.ID, o.Err, worker.IsPermanent(o.Err), why, tc.permanent)
			}
			rec := worktest.ReadTopic(t, e.Kafka, "dq.dead", 1, 10*time.Second)[0]
			if reason, _ := testenv.Header(rec, "dq-error"); reason != why {
				t.Errorf("dead letter dq-error %q, want %q", reason, why)
			}
		})
	}
}

// An unknown UnhandledTypes value is a configuration error.
func TestUnhandledTypesChecked(t *testing.T) {
	e := newEnv(t)
	cfg, _ := e.config(t, "w1")
	cfg.UnhandledTypes = worker.Unhandled(7)
	if _, err := worker.New(cfg); err == nil || !strings.Contains(err.Error(), "UnhandledTypes 7") {
		t.Fatalf("New: %v, want an UnhandledTypes error", err)
	}
}
