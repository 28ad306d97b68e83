package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/task"
)

// Micro-batches: the fetch loop hands over whatever records FetchMessage
// returned within BatchWindow of the first one (at most MaxBatch, and no
// more than Config.MaxHeld records held at once). A batch costs one Redis
// round trip to claim every record's execution and read its task
// (Store.ClaimMany), one to the Limiter when one is set, then its
// handlers run on the runners and their outcomes are stored by the
// finisher, which coalesces concurrent outcomes into one pipeline.
const (
	MaxBatch    = 256
	BatchWindow = time.Millisecond
)

// Config is what the engine needs: the public worker.Config less its
// connections (Kafka, Redis), which the caller opens and hands to Run.
// The caller sets every default; Validate checks the values.
type Config struct {
	// Holding records: at most Concurrency handlers run; at most MaxHeld
	// records (MaxHeldBytes bytes) are held, fetched and not yet ended.
	Concurrency  int
	MaxHeld      int
	MaxHeldBytes int64
	MaxPayload   int // larger records are dead-lettered; negative: no limit

	// Timing: DefaultTimeout for tasks without their own; ClaimMargin
	// added to a task's timeout for its claim's TTL; how often offsets
	// are committed; how long Run waits for running handlers at shutdown;
	// how often parked tasks of types no longer paused are unparked.
	DefaultTimeout  time.Duration
	ClaimMargin     time.Duration
	CommitInterval  time.Duration
	ShutdownTimeout time.Duration
	PauseReconcile  time.Duration
	// Retention is the store's: a record of an unknown task fired longer
	// ago than this is an old record replayed, skipped.
	Retention time.Duration
	// Instance names this worker in claims and logs.
	Instance string

	// Dead letters: the topic (for logs), the queue's bound and how long
	// one is retried.
	DeadTopic        string
	DeadLetterQueue  int
	DeadLetterMaxAge time.Duration

	Logger          *slog.Logger
	Registerer      prometheus.Registerer // nil: metrics are not registered
	MetricsMaxTypes int

	// Handler finds the handler of a task type (nil: none; the task
	// fails: for good, "no handler for task type ...", unless
	// RetryUnhandled, when it is retried like any failure until its last
	// attempt). Backoff is the delay after a failed attempt (1-based).
	Handler        func(typ string) HandlerFunc
	RetryUnhandled bool
	Backoff        func(attempt int) time.Duration
	// Limiter and Pause are optional (nil: everything runs). OnOutcome,
	// when set, gets every stored outcome (see Outcome).
	Limiter   Limiter
	Pause     PauseView
	OnOutcome func(Outcome)
}

// Validate reports the first value out of its range. Its errors are
// worker.Config's (the caller adds "worker: ").
func (c *Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency %d below 1", c.Concurrency)
	case c.MaxHeld < c.Concurrency:
		return fmt.Errorf("MaxHeld %d below concurrency %d", c.MaxHeld, c.Concurrency)
	case c.MaxHeldBytes < 1:
		return fmt.Errorf("MaxHeldBytes %d below 1", c.MaxHeldBytes)
	case c.DefaultTimeout < 0 || c.DefaultTimeout > task.MaxTimeout:
		return fmt.Errorf("default timeout %s not within 0..%s", c.DefaultTimeout, task.MaxTimeout)
	case c.ClaimMargin < 0 || c.CommitInterval < 0 || c.ShutdownTimeout < 0:
		return errors.New("negative claim margin, commit interval or shutdown timeout")
	case c.PauseReconcile < 0:
		return fmt.Errorf("negative PauseReconcile %s", c.PauseReconcile)
	case c.MetricsMaxTypes < 1:
		return fmt.Errorf("MetricsMaxTypes %d below 1", c.MetricsMaxTypes)
	case c.DeadLetterQueue < 1 || c.DeadLetterMaxAge < 0:
		return fmt.Errorf("DeadLetterQueue %d below 1 or negative DeadLetterMaxAge", c.DeadLetterQueue)
	case c.Logger == nil || c.Handler == nil || c.Backoff == nil:
		return errors.New("engine: no Logger, Handler or Backoff")
	}
	return nil
}

// PauseView says which task types are paused (worker.PauseView, whose
// methods are these).
type PauseView interface {
	Paused(typ string) bool
	Synced() bool
}

// HandlerFunc runs one execution; the worker package's face turns it into
// the user's worker.HandlerFunc.
type HandlerFunc func(ctx context.Context, x *Execution) error
