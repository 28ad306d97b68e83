package engine

import (
	"errors"
	"time"
)

// Execution is one run of a task, as its handler sees it. Its fields are
// worker.Task's, in the same order and of the same types: the worker
// package converts a *Execution to a *worker.Task (a pointer conversion:
// no copy, no allocation), and a field added to one without the other
// fails that conversion at compile time. See worker.Task for their
// meaning.
type Execution struct {
	ID          string
	Type        string
	Payload     []byte
	ContentType string
	Attempt     int
	MaxAttempts int
	Gen         uint64
	DueAt       time.Time
	FiredAt     time.Time
	Headers     map[string]string
	Priority    int
	Timeout     time.Duration
}

// LastAttempt reports whether a failure of this execution is final.
func (x *Execution) LastAttempt() bool { return x.Attempt >= x.MaxAttempts }

// Mark is an error that says how a failure is to be handled: what
// worker.Retry, worker.RetryAfter and worker.Permanent return.
type Mark struct {
	Err       error
	Permanent bool
	After     time.Duration // > 0: retry after exactly this long
}

func (m *Mark) Error() string {
	if m.Err == nil {
		if m.Permanent {
			return "permanent failure"
		}
		return "retry"
	}
	return m.Err.Error()
}

func (m *Mark) Unwrap() error { return m.Err }

// IsPermanent reports whether err was marked permanent.
func IsPermanent(err error) bool {
	var m *Mark
	return errors.As(err, &m) && m.Permanent
}

// RetryDelay reports the delay err was marked with (worker.RetryAfter).
func RetryDelay(err error) (time.Duration, bool) {
	var m *Mark
	if errors.As(err, &m) && !m.Permanent && m.After > 0 {
		return m.After, true
	}
	return 0, false
}

// OutcomeKind says what became of one execution (worker.OutcomeKind's
// values).
type OutcomeKind string

// The outcomes reported to Config.OnOutcome.
const (
	OutcomeSucceeded OutcomeKind = "succeeded"
	OutcomeFailed    OutcomeKind = "failed"
	OutcomeDead      OutcomeKind = "dead"
)

// Outcome is a stored outcome of one execution, reported to
// Config.OnOutcome (worker.Outcome, with the execution as Exec).
type Outcome struct {
	Kind              OutcomeKind
	Exec              *Execution
	Err               error
	Shard             int
	Started, Finished time.Time
	Duration          time.Duration
	RetryIn           time.Duration
}
