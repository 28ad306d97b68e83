package worker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/work/engine"
)

// The worker is the face of its runtime (internal/work/engine): the types
// users write code against are declared here, and the engine gets what it
// needs through the adapters below, with no allocation per task. Task and
// the Limiter's LimitItem and LimitDecision have the fields of the
// engine's Execution, LimitItem and LimitDecision, in order, and convert
// to them as they are (a *engine.Execution is handed to a handler as a
// *Task); a field added to one side only fails to compile here.

// handlerOf is h as the engine calls it: nil stays nil (no handler).
func handlerOf(h HandlerFunc) engine.HandlerFunc {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, x *engine.Execution) error { return h(ctx, (*Task)(x)) }
}

// outcomeOf is fn as the engine calls it: nil stays nil.
func outcomeOf(fn OnOutcomeFunc) func(engine.Outcome) {
	if fn == nil {
		return nil
	}
	return func(o engine.Outcome) {
		fn(Outcome{Kind: OutcomeKind(o.Kind), Task: (*Task)(o.Exec), Err: o.Err, Shard: o.Shard,
			Started: o.Started, Finished: o.Finished, Duration: o.Duration, RetryIn: o.RetryIn})
	}
}

// limiterOf is l as the engine calls it (nil stays nil); a LimitRenewer
// stays one.
func limiterOf(l Limiter) engine.Limiter {
	if l == nil {
		return nil
	}
	if r, ok := l.(LimitRenewer); ok {
		return renewerFace{limiterFace{l}, r}
	}
	return limiterFace{l}
}

// limiterFace is a Limiter as the engine sees it.
type limiterFace struct{ l Limiter }

// Admit converts the batch (one slice each way, per batch).
func (f limiterFace) Admit(ctx context.Context, items []engine.LimitItem) ([]engine.LimitDecision, error) {
	in := make([]LimitItem, len(items))
	for i := range items {
		in[i] = LimitItem(items[i])
	}
	ds, err := f.l.Admit(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]engine.LimitDecision, len(ds))
	for i := range ds {
		out[i] = engine.LimitDecision(ds[i])
	}
	return out, nil
}

func (f limiterFace) Done(ctx context.Context, it engine.LimitItem, d engine.LimitDecision) {
	f.l.Done(ctx, LimitItem(it), LimitDecision(d))
}

// Limits forwards to a Limiter that is a LimitScoper (engine.LimitScoper);
// any other may limit every type.
func (f limiterFace) Limits(typ string) bool {
	if s, ok := f.l.(LimitScoper); ok {
		return s.Limits(typ)
	}
	return true
}

// Hold forwards to a Limiter that is a LimitHolder (engine.LimitHolder);
// for any other it holds nothing.
func (f limiterFace) Hold(ctx context.Context, it engine.LimitItem, until time.Time) error {
	if h, ok := f.l.(LimitHolder); ok {
		return h.Hold(ctx, LimitItem(it), until)
	}
	return nil
}

// renewerFace is a LimitRenewer as the engine sees it.
type renewerFace struct {
	limiterFace
	r LimitRenewer
}

func (f renewerFace) Renew(ctx context.Context, it engine.LimitItem, d engine.LimitDecision) (bool, error) {
	return f.r.Renew(ctx, LimitItem(it), LimitDecision(d))
}
