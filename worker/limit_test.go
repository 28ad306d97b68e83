package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// fakeLimiter fails its first fail calls, then defers every task of type
// "held" once (NotBefore 200ms ahead) and admits the rest; it counts
// admissions and Done calls.
type fakeLimiter struct {
	mu       sync.Mutex
	fail     int
	calls    int
	deferred map[string]bool
	admitted map[string]int
	done     map[string]int
}

func (l *fakeLimiter) Admit(ctx context.Context, items []worker.LimitItem) ([]worker.LimitDecision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.fail > 0 {
		l.fail--
		return nil, errors.New("redis down")
	}
	out := make([]worker.LimitDecision, len(items))
	for i, it := range items {
		if it.Type == "held" && !l.deferred[it.ID] {
			l.deferred[it.ID] = true
			out[i] = worker.LimitDecision{NotBefore: time.Now().Add(200 * time.Millisecond), Reason: "test"}
			continue
		}
		l.admitted[it.ID]++
		out[i] = worker.LimitDecision{Run: true, Ticket: it.ID}
	}
	return out, nil
}

func (l *fakeLimiter) Done(ctx context.Context, it worker.LimitItem, d worker.LimitDecision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Ticket != it.ID {
		panic(fmt.Sprintf("Done with ticket %v for %s", d.Ticket, it.ID))
	}
	l.done[it.ID]++
}

// runLimited runs tasks (ids) on one worker whose Limiter is lim, whose
// counts are f's, until all succeeded and f saw wantDone Done calls; a task
// run twice fails the test.
func runLimited(t *testing.T, lim worker.Limiter, f *fakeLimiter, tasks []*task.Task, ids []string, wantDone int) (*env, *running) {
	t.Helper()
	e := newEnv(t)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	cfg.Limiter = lim
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			return nil
		})
	})
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, tasks...)
	e.WaitState(t, 20*time.Second, task.StateSucceeded, ids...)
	testenv.WaitFor(t, 5*time.Second, "Done called for every limited run", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.done) == wantDone
	})
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	return e, r
}

// A Limiter's deferrals go back to Redis (not an attempt) and run later; a
// failing Limiter defers the whole batch (fail closed) without dropping it
// or using an attempt; Done follows every admitted run.
func TestLimiterDefersAndFailsClosed(t *testing.T) {
	lim := &fakeLimiter{fail: 3, deferred: map[string]bool{}, admitted: map[string]int{}, done: map[string]int{}}

	var ids []string
	var tasks []*task.Task
	for i := range 20 {
		typ := "free"
		if i%2 == 0 {
			typ = "held"
		}
		id := fmt.Sprintf("%s-%d", typ, i)
		ids = append(ids, id)
		tasks = append(tasks, newTask(id, typ))
	}
	e, r := runLimited(t, lim, lim, tasks, ids, len(ids))
	for _, id := range ids {
		tk, err := e.Store.Get(t.Context(), id)
		if err != nil || tk.Attempt != 1 {
			t.Fatalf("%s: attempt %d (%v): a deferral must not use an attempt", id, tk.Attempt, err)
		}
		if lim.admitted[id] != 1 || lim.done[id] != 1 {
			t.Fatalf("%s: admitted %d, done %d", id, lim.admitted[id], lim.done[id])
		}
		if tk.Type == "held" && tk.Gen < 1 {
			t.Fatalf("%s: generation %d: the deferred task did not wait again (a deferral raises the generation)", id, tk.Gen)
		}
	}
	if lim.fail != 0 {
		t.Fatalf("limiter failures left: %d", lim.fail)
	}
	if got := r.handled(t, "deferred"); got < 10 {
		t.Errorf("deferred metric %v, want at least 10 (plus the failed batches)", got)
	}
	t.Logf("Admit calls %d, deferred %v", lim.calls, r.handled(t, "deferred"))
}

// scopedLimiter is a fakeLimiter that is a LimitScoper limiting one type.
type scopedLimiter struct {
	*fakeLimiter
	typ string
}

func (l scopedLimiter) Limits(typ string) bool { return typ == l.typ }

// A LimitScoper's unlimited types run without Admit or Done (no round
// trip for types without a rule); its limited ones, in the same batches,
// keep their decisions in order: deferred, admitted, Done once.
func TestLimitScoperBypassesUnlimitedTypes(t *testing.T) {
	lim := scopedLimiter{&fakeLimiter{deferred: map[string]bool{}, admitted: map[string]int{}, done: map[string]int{}}, "held"}

	var ids, held []string
	var tasks []*task.Task
	for i := range 40 {
		typ := "free"
		if i%3 == 0 {
			typ = "held"
		}
		id := fmt.Sprintf("%s-%d", typ, i)
		ids = append(ids, id)
		if typ == "held" {
			held = append(held, id)
		}
		tasks = append(tasks, newTask(id, typ))
	}
	runLimited(t, lim, lim.fakeLimiter, tasks, ids, len(held))
	lim.mu.Lock()
	defer lim.mu.Unlock()
	for _, id := range held {
		if !lim.deferred[id] || lim.admitted[id] != 1 || lim.done[id] != 1 {
			t.Fatalf("%s (limited): deferred %v, admitted %d, done %d; want deferred once, then admitted and done once",
				id, lim.deferred[id], lim.admitted[id], lim.done[id])
		}
	}
	if len(lim.admitted) != len(held) || len(lim.done) != len(held) {
		t.Fatalf("Admit saw %d tasks and Done %d, want only the %d of the limited type", len(lim.admitted), len(lim.done), len(held))
	}
}
