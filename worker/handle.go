package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// claimPoll is how often a record whose execution another run holds checks
// again.
const claimPoll = 200 * time.Millisecond

// execute runs the handler under the task's timeout, recovering a panic,
// from start (now), and returns how long it ran. The handler's context
// comes from ht (ctx's child), fenced by lease (nil: none; see
// limitLease.call).
func (w *Worker) execute(ctx context.Context, ht *handlerTimer, log *slog.Logger, t *Task, start time.Time, lease *limitLease) (time.Duration, error) {
	h := w.handler(t.Type)
	w.met.lag.Observe(max(start.Sub(t.DueAt).Seconds(), 0))
	if h == nil {
		return time.Since(start), fmt.Errorf("no handler for task type %q", t.Type)
	}
	hctx := ht.startAt(start, t.Timeout)
	defer ht.finish(hctx)
	err := lease.call(hctx, log, h, t)
	ran := time.Since(start)
	w.met.observeDuration(t.Type, ran.Seconds())
	if err != nil && ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) && !IsPermanent(err) {
		err = fmt.Errorf("timed out after %s: %w", t.Timeout, err)
	}
	return ran, err
}

func call(ctx context.Context, log *slog.Logger, h HandlerFunc, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, t)
}

// pendingOutcome is the outcome of an item's run on its way to Redis:
// set by decide once the handler returned, stored by the finisher.
type pendingOutcome struct {
	job   *Task // the execution as its handler saw it
	herr  error // the handler's error
	f     redisstore.Finish
	label string // of delayq_work_handled_total
	why   string // why a dead task died
	run   runInfo
}

// decide sets it.out to the outcome of its run of job: succeeded, retry
// with backoff, or dead.
func (w *Worker) decide(it *item, job *Task, herr error, run runInfo) {
	o := &it.out
	*o = pendingOutcome{job: job, herr: herr, run: run,
		f: redisstore.Finish{ID: job.ID, Gen: job.Gen, Owner: it.cl.value, Shard: it.cl.shard, ShardSet: it.cl.shard >= 0}}
	switch {
	case herr == nil:
		o.f.Kind, o.label = redisstore.Succeeded, outSucceeded
	case IsPermanent(herr) || job.LastAttempt():
		o.f.Kind, o.label, o.f.Error = redisstore.Dead, outDead, herr.Error()
		o.why = "permanent failure"
		if !IsPermanent(herr) {
			o.why = fmt.Sprintf("attempt %d of %d failed", job.Attempt, job.MaxAttempts)
		}
	default:
		d, ok := RetryDelay(herr)
		if !ok {
			d = w.cfg.Backoff.next(job.Attempt)
		}
		o.f.Kind, o.label, o.f.Error = redisstore.Retry, outRetry, herr.Error()
		o.f.Relative, o.f.Delay = true, d
		it.log.Debug("task failed; retrying", "type", job.Type, "attempt", job.Attempt, "delay", d, "err", herr)
	}
}

// report stores the outcome of an item's run (it.out, see decide) and
// then ends the item, without waiting for it: the finisher stores the
// outcome in its next pipeline and hands the answer to outcomeAnswered
// on its own goroutine, while the runner goes on with its next item
// (waiting for the answer parked the runner and woke it again for every
// task). The item counts in w.running until it ended.
//
// A dead task's state is stored in Redis first (the record of truth: the
// dead listing shows it at once, and the record may be committed); its
// dead letter is then queued for the dead topic (see deadLetters), which
// never holds the record back.
func (w *Worker) report(ctx context.Context, it *item) {
	w.running.Add(1) // the caller's item counts: the count is above 0
	if !w.finisher.queue(ctx, it) {
		w.outcomeAnswered(ctx, it, ctx.Err())
	}
}

// outcomeAnswered ends an item once the store answered about its outcome
// (err: nil when it was stored), on the finisher's goroutine. An error of
// Redis, or ctx's end, goes on in a goroutine of its own (storeOutcome),
// which stores the outcome again with backoff, so that the finisher never
// waits for Redis on an item's behalf.
func (w *Worker) outcomeAnswered(ctx context.Context, it *item, err error) {
	if err != nil && (!storeAnswered(err) || ctx.Err() != nil) {
		go func() {
			defer w.running.Done()
			w.storeOutcome(ctx, it, err)
		}()
		return
	}
	w.stored(ctx, it, err)
	w.end(it.m, true) // the finish gave the claim up
	w.running.Done()
}

// storeOutcome stores it.out again after the first try failed with
// firstErr, retrying while Redis is unreachable, and ends the item; a
// record whose outcome was not stored before ctx ended stays uncommitted.
func (w *Worker) storeOutcome(ctx context.Context, it *item, firstErr error) {
	var reply chan redisstore.FinishResult
	err := w.retryRedis(ctx, it.log, "store outcome", func() error {
		err := firstErr
		if firstErr != nil {
			firstErr = nil
		} else {
			_, err = w.finisher.finish(ctx, it.out.f, &reply)
			if ownOutcome(it.out.f.Kind, err) {
				// an earlier try whose outcome was unknown (a timeout, the
				// replicas' confirmation missing) had stored it
				err = nil
			}
		}
		if err == nil || storeAnswered(err) || ctx.Err() != nil {
			return err
		}
		w.met.redisRetries.WithLabelValues("finish").Inc()
		return &retryable{err} // any Redis error: the outcome is stored again
	})
	finished := w.stored(ctx, it, err)
	if !finished {
		w.claims.release(context.WithoutCancel(ctx), it.cl)
	}
	w.end(it.m, finished)
}

// stored completes the report of it.out once the store answered (err:
// nil when the outcome was stored): the dead letter, OnOutcome, metrics.
// It returns false only when ctx ended before the outcome was stored.
func (w *Worker) stored(ctx context.Context, it *item, err error) bool {
	o, log := &it.out, it.log
	switch {
	case err == nil && o.f.Kind == redisstore.Dead:
		log.Warn("task dead", "type", o.job.Type, "attempt", o.job.Attempt, "why", o.why, "err", o.herr)
		w.deadq.enqueue(record.DeadLetter(it.m, o.herr.Error(), o.job.Attempt, time.Now(), w.cfg.MaxPayload))
		w.notify(log, o.f, o.job, o.herr, o.run)
	case err == nil:
		w.notify(log, o.f, o.job, o.herr, o.run)
	case ctx.Err() != nil:
		log.Warn("outcome not stored before shutdown; the record stays uncommitted", "outcome", o.label)
		return false
	default:
		// Fired again, cancelled, or finished by someone else meanwhile:
		// nothing of ours to store.
		log.Warn("outcome not stored", "outcome", o.label, "err", err)
	}
	if o.label == outRetry {
		w.met.retries.Inc()
	}
	w.met.handledInc(o.job.Type, o.label)
	return true
}

// storeAnswered reports whether err is the store's answer about a task
// (the task was fired again, finished or cancelled by someone else, or is
// gone), as opposed to an error of Redis (unreachable, OOM, READONLY, a
// script error, ...), which says nothing about the task: the write is
// retried, never taken as a verdict on the task.
func storeAnswered(err error) bool {
	return errors.Is(err, redisstore.ErrStale) || errors.Is(err, redisstore.ErrConflict) ||
		errors.Is(err, redisstore.ErrNotFound)
}

// ownOutcome reports whether err, the store's answer to storing an
// outcome of kind k again, is what an earlier try of the same outcome
// leaves: the task finished in that state (success, dead), or fired again
// under a new generation (retry, deferral). storeOutcome stores again only
// after a try whose outcome is unknown, so the answer most likely says
// that try applied: the outcome is then reported (dead letter, outcome
// record) as stored, instead of being dropped as someone else's.
func ownOutcome(k redisstore.Kind, err error) bool {
	var se *redisstore.StateError
	switch k {
	case redisstore.Succeeded:
		return errors.As(err, &se) && se.State == task.StateSucceeded
	case redisstore.Dead:
		return errors.As(err, &se) && se.State == task.StateDead
	case redisstore.Retry, redisstore.Defer:
		return errors.Is(err, redisstore.ErrStale)
	}
	return false
}

// retryable marks an error retryRedis retries although Redis answered.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// redisBackoff is the delay between tries of a Redis call the worker must
// not give up: 50ms, doubling, at most 5s.
func redisBackoff() retry.Backoff {
	return retry.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second, NoJitter: true}
}

// retryRedis runs op until it succeeds, fails with an error that is not
// "Redis unavailable" (or marked retryable), or ctx ends; it backs off
// 50ms..5s between tries.
func (w *Worker) retryRedis(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	bo := redisBackoff()
	for {
		err := op()
		if err == nil {
			return nil
		}
		var r *retryable
		marked := errors.As(err, &r)
		transient := marked || redisstore.IsUnavailable(err)
		if ctx.Err() != nil || !transient {
			if marked {
				return r.err
			}
			return err
		}
		delay := bo.Next()
		log.Warn("redis: "+what+" failed; retrying", "err", err, "retry_in", delay)
		if !retry.Sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// deadLetterHostile queues a record that is not a usable delayq record for
// the dead topic with the reason. The record is finished (committed): it
// never holds its partition back, whether or not the dead topic takes it.
func (w *Worker) deadLetterHostile(m *kafka.Message, reason string) {
	w.met.handledInc(typeInvalid, outHostile)
	w.log.Warn("dead-lettering a record that is not a usable delayq task", "reason", reason,
		"topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
	w.deadq.enqueue(record.DeadLetter(m, reason, 0, time.Now(), w.cfg.MaxPayload))
}

// runInfo is what report needs to know about a run besides its outcome.
type runInfo struct {
	shard   int
	started time.Time
	dur     time.Duration // how long the handler ran
}

// notify hands a stored outcome to Config.OnOutcome, recovering a panic.
func (w *Worker) notify(log *slog.Logger, f redisstore.Finish, t *Task, herr error, run runInfo) {
	fn := w.cfg.OnOutcome
	if fn == nil {
		return
	}
	o := Outcome{Task: t, Err: herr, Shard: run.shard, Started: run.started, Finished: time.Now(), Duration: run.dur}
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
