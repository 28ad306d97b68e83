package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Handlers run on reused goroutines (runners) with a handler context of
// their own: no more than Concurrency run at once, each sees its own task
// and a fresh context that is cancelled once it returned (also when a
// later task runs on the same runner), and a task with a short timeout
// after many quick ones still ends at its deadline.
func TestRunnersKeepNoStateBetweenTasks(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	cfg.Concurrency = 3
	type seen struct {
		ctx context.Context
		id  string
	}
	var (
		mu            sync.Mutex
		inFlight, top int
		runs          []seen
		ctxs          = map[context.Context]string{}
		slowErr       error
	)
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("quick", func(ctx context.Context, tk *worker.Task) error {
			mu.Lock()
			inFlight++
			top = max(top, inFlight)
			if other, ok := ctxs[ctx]; ok {
				t.Errorf("task %s got the context of task %s", tk.ID, other)
			}
			ctxs[ctx] = tk.ID
			runs = append(runs, seen{ctx, tk.ID})
			mu.Unlock()
			if want := `{"id":"` + tk.ID + `"}`; string(tk.Payload) != want {
				t.Errorf("task %s: payload %s", tk.ID, tk.Payload)
			}
			if ctx.Err() != nil {
				t.Errorf("task %s: context ended at the start: %v", tk.ID, ctx.Err())
			}
			time.Sleep(time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			return nil
		})
		w.Handle("slow", func(ctx context.Context, tk *worker.Task) error {
			started := time.Now()
			<-ctx.Done()
			mu.Lock()
			slowErr = ctx.Err()
			mu.Unlock()
			if d := time.Since(started); d < 150*time.Millisecond || d > 3*time.Second {
				t.Errorf("the slow task's context ended after %v; its timeout is 200ms", d)
			}
			return ctx.Err()
		})
	})
	const n = 200
	var tasks []*task.Task
	var ids []string
	for i := range n {
		id := fmt.Sprintf("quick-%d", i)
		tasks = append(tasks, newTask(id, "quick"))
		ids = append(ids, id)
	}
	worktest.Fire(t, e.Firer, tasks...)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)

	slow := newTask("slow-1", "slow")
	slow.Timeout, slow.MaxAttempts = 200*time.Millisecond, 1
	worktest.Fire(t, e.Firer, slow)
	e.WaitState(t, 30*time.Second, task.StateDead, "slow-1")

	mu.Lock()
	defer mu.Unlock()
	if top > cfg.Concurrency {
		t.Errorf("%d handlers ran at once; Concurrency is %d", top, cfg.Concurrency)
	}
	if len(runs) != n {
		t.Errorf("%d quick runs, want %d", len(runs), n)
	}
	for _, r := range runs {
		if !errors.Is(r.ctx.Err(), context.Canceled) {
			t.Errorf("task %s: its context after it returned: %v, want Canceled", r.id, r.ctx.Err())
		}
	}
	if !errors.Is(slowErr, context.DeadlineExceeded) {
		t.Errorf("the slow task's context ended with %v, want DeadlineExceeded", slowErr)
	}
}

// Every handler slot is used while items wait: Concurrency handlers that
// each wait for the others all run at once (runners are woken one after
// the other, each by the one before).
func TestRunnersFillEveryHandlerSlot(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	cfg.Concurrency = 6
	var (
		mu       sync.Mutex
		inFlight int
		all      = make(chan struct{})
	)
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("together", func(ctx context.Context, tk *worker.Task) error {
			mu.Lock()
			if inFlight++; inFlight == cfg.Concurrency {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return nil
			case <-ctx.Done():
				mu.Lock()
				defer mu.Unlock()
				return fmt.Errorf("only %d handlers ran at once", inFlight)
			}
		})
	})
	var tasks []*task.Task
	var ids []string
	for i := range cfg.Concurrency {
		id := fmt.Sprintf("together-%d", i)
		tk := newTask(id, "together")
		tk.Timeout, tk.MaxAttempts = 20*time.Second, 1
		tasks = append(tasks, tk)
		ids = append(ids, id)
	}
	worktest.Fire(t, e.Firer, tasks...)
	e.WaitState(t, 60*time.Second, task.StateSucceeded, ids...)
}
