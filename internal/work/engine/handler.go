package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
)

// execute runs the handler under the task's timeout, recovering a panic,
// from start (now), and returns how long it ran. The handler's context
// comes from ht (ctx's child), with tctx's values when not nil (its trace
// context: see trace.go), fenced by lease (nil: none; see
// limitLease.call).
func (e *Engine) execute(ctx context.Context, ht *handlerTimer, log *slog.Logger, x *Execution, start time.Time, lease *limitLease,
	tctx context.Context, //nolint:revive // not the run's context: only the values (trace context) its handler's context takes
) (time.Duration, error) {
	h := e.cfg.Handler(x.Type)
	ex := exemplar(tctx) // nil unless its attempt span is sampled
	observe(e.met.lag, max(start.Sub(x.DueAt).Seconds(), 0), ex)
	if h == nil {
		return time.Since(start), e.unhandled(x)
	}
	hctx := ht.startWith(start, x.Timeout, tctx)
	defer ht.finish(hctx)
	err := lease.call(hctx, log, h, x)
	ran := time.Since(start)
	e.met.observeDuration(x.Type, ran.Seconds(), ex)
	if err != nil && ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) && !IsPermanent(err) {
		err = fmt.Errorf("timed out after %s: %w", x.Timeout, err)
	}
	return ran, err
}

// unhandled is the failure of an execution whose type has no handler:
// permanent (dead now) unless Config.RetryUnhandled.
func (e *Engine) unhandled(x *Execution) error {
	err := fmt.Errorf("no handler for task type %q", x.Type)
	if e.cfg.RetryUnhandled {
		return err
	}
	return &Mark{Err: err, Permanent: true}
}

func call(ctx context.Context, log *slog.Logger, h HandlerFunc, x *Execution) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, x)
}

// notify hands a stored outcome to Config.OnOutcome, recovering a panic.
func (e *Engine) notify(log *slog.Logger, f redisstore.Finish, x *Execution, herr error, run runInfo) {
	fn := e.cfg.OnOutcome
	if fn == nil {
		return
	}
	o := Outcome{Exec: x, Err: herr, Shard: run.shard, Started: run.started, Finished: time.Now(), Duration: run.dur}
	switch f.Kind {
	case redisstore.Succeeded:
		o.Kind = OutcomeSucceeded
	case redisstore.Dead:
		o.Kind = OutcomeDead
	default:
		o.Kind, o.RetryIn = OutcomeFailed, f.Delay
	}
	defer func() {
		if r := recover(); r != nil {
			log.Error("OnOutcome panicked", "panic", fmt.Sprint(r), "outcome", string(o.Kind))
		}
	}()
	fn(o)
}
