package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// claimPoll is how often a record whose execution another run holds checks
// again.
const claimPoll = 200 * time.Millisecond

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
func retryRedis(ctx context.Context, log *slog.Logger, what string, op func() error) error {
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
