package worker

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/work/engine"
)

// The engine's outcome kinds are the public ones.
func TestOutcomeKindsAreTheEngines(t *testing.T) {
	for _, c := range []struct {
		pub OutcomeKind
		eng engine.OutcomeKind
	}{{OutcomeSucceeded, engine.OutcomeSucceeded}, {OutcomeFailed, engine.OutcomeFailed}, {OutcomeDead, engine.OutcomeDead}} {
		if string(c.pub) != string(c.eng) {
			t.Errorf("worker %q, engine %q", c.pub, c.eng)
		}
	}
}

// A handler sees the engine's execution itself as its Task, and
// OnOutcome the same Task.
func TestFaceHandsTheExecutionOver(t *testing.T) {
	x := &engine.Execution{ID: "a", Type: "t", Payload: []byte("p"), Attempt: 2, MaxAttempts: 3, Gen: 7,
		Headers: map[string]string{"k": "v"}, Priority: 4, Timeout: time.Second}
	var seen *Task
	h := handlerOf(func(_ context.Context, tk *Task) error { seen = tk; return nil })
	if err := h(t.Context(), x); err != nil || seen == nil {
		t.Fatalf("handler: %v, %v", err, seen)
	}
	if seen.ID != "a" || seen.Gen != 7 || seen.Headers["k"] != "v" || seen.Timeout != time.Second || seen.LastAttempt() {
		t.Fatalf("task %+v", seen)
	}
	var got Outcome
	outcomeOf(func(o Outcome) { got = o })(engine.Outcome{Kind: engine.OutcomeFailed, Exec: x, RetryIn: time.Minute})
	if got.Task != seen || got.Kind != OutcomeFailed || got.RetryIn != time.Minute {
		t.Fatalf("outcome %+v", got)
	}
	if handlerOf(nil) != nil || outcomeOf(nil) != nil || limiterOf(nil) != nil {
		t.Fatal("nil does not stay nil")
	}
}

type faceLimiter struct {
	items []LimitItem
	done  LimitDecision
	renew LimitItem
}

func (l *faceLimiter) Admit(_ context.Context, items []LimitItem) ([]LimitDecision, error) {
	l.items = items
	if len(items) == 0 {
		return nil, errors.New("empty")
	}
	return []LimitDecision{{Run: true, Ticket: "tk", RenewEvery: time.Second, HoldFor: 3 * time.Second}}, nil
}

func (l *faceLimiter) Done(_ context.Context, _ LimitItem, d LimitDecision) { l.done = d }

func (l *faceLimiter) Renew(_ context.Context, it LimitItem, _ LimitDecision) (bool, error) {
	l.renew = it
	return true, nil
}

// The Limiter's items and decisions go through the face unchanged; a
// LimitRenewer stays one; errors pass.
func TestLimiterFace(t *testing.T) {
	l := &faceLimiter{}
	el := limiterOf(l)
	due := time.UnixMilli(1_700_000_000_000)
	ds, err := el.Admit(t.Context(), []engine.LimitItem{{ID: "a", Type: "t", Priority: 2, Key: "k", Headers: map[string]string{"tenant": "x"}, Due: due}})
	if err != nil || len(ds) != 1 || !ds[0].Run || ds[0].Ticket != "tk" || ds[0].HoldFor != 3*time.Second {
		t.Fatalf("decisions %+v, %v", ds, err)
	}
	if len(l.items) != 1 || !reflect.DeepEqual(l.items[0], LimitItem{ID: "a", Type: "t", Priority: 2, Key: "k", Headers: map[string]string{"tenant": "x"}, Due: due}) {
		t.Fatalf("items %+v", l.items)
	}
	el.Done(t.Context(), engine.LimitItem{ID: "a"}, ds[0])
	if l.done.Ticket != "tk" || l.done.RenewEvery != time.Second {
		t.Fatalf("done with %+v", l.done)
	}
	r, ok := el.(engine.LimitRenewer)
	if !ok {
		t.Fatal("a LimitRenewer is no longer one")
	}
	if held, err := r.Renew(t.Context(), engine.LimitItem{ID: "b"}, ds[0]); !held || err != nil || l.renew.ID != "b" {
		t.Fatalf("renew: %v, %v, %+v", held, err, l.renew)
	}
	if _, err := el.Admit(t.Context(), nil); err == nil {
		t.Fatal("the Limiter's error is lost")
	}
	if _, ok := limiterOf(struct{ Limiter }{l}).(engine.LimitRenewer); ok {
		t.Fatal("a plain Limiter became a LimitRenewer")
	}
}
