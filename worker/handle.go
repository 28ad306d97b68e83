package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/redisstore"
)

// claimPoll is how often a record whose execution another run holds checks
// again.
const claimPoll = 200 * time.Millisecond

// execute runs the handler under the task's timeout, recovering a panic.
func (w *Worker) execute(ctx context.Context, log *slog.Logger, t *Task) error {
	h := w.handler(t.Type)
	start := time.Now()
	w.met.lag.Observe(max(start.Sub(t.DueAt).Seconds(), 0))
	if h == nil {
		return fmt.Errorf("no handler for task type %q", t.Type)
	}
	hctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	err := call(hctx, log, h, t)
	w.met.duration.WithLabelValues(t.Type).Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) && !IsPermanent(err) {
		err = fmt.Errorf("timed out after %s: %w", t.Timeout, err)
	}
	return err
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

// report stores the outcome of a run: succeeded, retry with backoff, or
// dead (dead letter first, then the dead state). It returns false only when
// ctx ended before the outcome was stored.
func (w *Worker) report(ctx context.Context, log *slog.Logger, m *kafka.Message, t *Task, herr error, owner string) bool {
	f := redisstore.Finish{ID: t.ID, Gen: t.Gen, Owner: owner}
	var label string
	switch {
	case herr == nil:
		f.Kind, label = redisstore.Succeeded, outSucceeded
	case IsPermanent(herr) || t.LastAttempt():
		f.Kind, label, f.Error = redisstore.Dead, outDead, herr.Error()
		why := "permanent failure"
		if !IsPermanent(herr) {
			why = fmt.Sprintf("attempt %d of %d failed", t.Attempt, t.MaxAttempts)
		}
		msg := deadMessage(m, herr.Error(), t.Attempt, time.Now(), w.cfg.MaxPayload)
		if err := w.writeDead(ctx, log, msg); err != nil {
			return false
		}
		w.met.dead.Inc()
		log.Warn("task dead", "type", t.Type, "attempt", t.Attempt, "why", why, "err", herr)
	default:
		d, ok := RetryDelay(herr)
		if !ok {
			d = w.cfg.Backoff.next(t.Attempt)
		}
		f.Kind, label, f.Error = redisstore.Retry, outRetry, herr.Error()
		f.Relative, f.Delay = true, d
		log.Debug("task failed; retrying", "type", t.Type, "attempt", t.Attempt, "delay", d, "err", herr)
	}
	err := w.retryRedis(ctx, log, "store outcome", func() error {
		_, err := w.finisher.finish(ctx, f)
		if err == nil || errors.Is(err, redisstore.ErrStale) || errors.Is(err, redisstore.ErrConflict) ||
			errors.Is(err, redisstore.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		return &retryable{err}
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		log.Warn("outcome not stored before shutdown; the record stays uncommitted", "outcome", label)
		return false
	default:
		// Fired again, cancelled, or finished by someone else meanwhile:
		// nothing of ours to store.
		log.Warn("outcome not stored", "outcome", label, "err", err)
	}
	if label == outRetry {
		w.met.retries.Inc()
	}
	w.met.handled.WithLabelValues(t.Type, label).Inc()
	return true
}

// retryable marks an error retryRedis retries although Redis answered.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// retryRedis runs op until it succeeds, fails with an error that is not
// "Redis unavailable" (or marked retryable), or ctx ends; it backs off
// 50ms..5s between tries.
func (w *Worker) retryRedis(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	delay := 50 * time.Millisecond
	for {
		err := op()
		if err == nil {
			return nil
		}
		var r *retryable
		marked := errors.As(err, &r)
		if ctx.Err() != nil || !(marked || redisstore.IsUnavailable(err)) {
			if marked {
				return r.err
			}
			return err
		}
		log.Warn("redis: "+what+" failed; retrying", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// deadLetterHostile writes a record that is not a usable delayq record to
// the dead topic with the reason.
func (w *Worker) deadLetterHostile(ctx context.Context, m *kafka.Message, reason string) bool {
	log := w.log.With("topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
	if err := w.writeDead(ctx, log, deadMessage(m, reason, 0, time.Now(), w.cfg.MaxPayload)); err != nil {
		return false
	}
	w.met.dead.Inc()
	w.met.handled.WithLabelValues(typeInvalid, outHostile).Inc()
	log.Warn("dead-lettered a record that is not a usable delayq task", "reason", reason)
	return true
}

// writeDead writes one dead letter synchronously, retrying until it is
// written or ctx ends. A record the broker refuses as too large is written
// again without its value.
func (w *Worker) writeDead(ctx context.Context, log *slog.Logger, msg kafka.Message) error {
	delay := 100 * time.Millisecond
	for {
		err := w.dead.WriteMessages(ctx, msg)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if tooLarge(err) && msg.Value != nil {
			log.Warn("dead letter too large; writing it without its value", "bytes", len(msg.Value))
			msg.Headers = append(msg.Headers, kafka.Header{Key: HeaderPayloadBytes, Value: fmt.Appendf(nil, "%d", len(msg.Value))})
			msg.Value = nil
			continue
		}
		log.Warn("write dead letter failed; retrying", "topic", w.cfg.DeadTopic, "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func tooLarge(err error) bool {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && tooLarge(e) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, kafka.MessageSizeTooLarge)
}
