package worker

import (
	"time"

	"github.com/delayq/delayq/internal/work/engine"
)

// Retry marks err as a failure to retry with the worker's backoff. It is
// what any error a handler returns means; Retry only makes it explicit.
func Retry(err error) error {
	return &engine.Mark{Err: err}
}

// RetryAfter marks err as a failure to retry after d exactly (no backoff, no
// jitter), e.g. what a Retry-After header asked for. The task still counts
// an attempt, so it dies after its last one.
func RetryAfter(d time.Duration, err error) error {
	return &engine.Mark{Err: err, After: max(d, time.Millisecond)}
}

// Permanent marks err as a failure that retrying cannot fix: the task goes
// to the dead letters now, whatever attempts it has left.
func Permanent(err error) error {
	return &engine.Mark{Err: err, Permanent: true}
}

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool { return engine.IsPermanent(err) }

// RetryDelay reports the delay err was marked with by [RetryAfter].
func RetryDelay(err error) (time.Duration, bool) { return engine.RetryDelay(err) }

// OutcomeKind says what became of one execution of a task.
type OutcomeKind string

// The outcomes a worker reports to [Config.OnOutcome].
const (
	// OutcomeSucceeded: the handler returned nil.
	OutcomeSucceeded OutcomeKind = "succeeded"
	// OutcomeFailed: the handler failed and the task will run again (it
	// waits in Redis with its next attempt).
	OutcomeFailed OutcomeKind = "failed"
	// OutcomeDead: the handler failed on the last attempt, or permanently
	// ([Permanent]); the task is dead (its dead letter is queued too).
	OutcomeDead OutcomeKind = "dead"
)

// Outcome is what became of one execution of a task, reported to
// [Config.OnOutcome] once the outcome is stored in Redis.
type Outcome struct {
	Kind OutcomeKind
	// Task is the execution as its handler saw it (Attempt is the attempt
	// that ran). It must not be modified.
	Task *Task
	// Err is the handler's error (nil when it succeeded).
	Err error
	// Shard is the task's shard.
	Shard int
	// Started and Finished are when the handler started and when the
	// outcome was stored; Finished - Started includes storing it.
	Started, Finished time.Time
	// Duration is how long the handler ran.
	Duration time.Duration
	// RetryIn is the delay before the next attempt (OutcomeFailed only).
	RetryIn time.Duration
}

// OnOutcomeFunc receives outcomes; see [Config.OnOutcome].
type OnOutcomeFunc func(Outcome)
