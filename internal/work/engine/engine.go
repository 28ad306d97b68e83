package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/work/kafkaread"
)

// abandonGrace bounds how long Run waits for handlers after cancelling their
// contexts at the shutdown deadline.
const abandonGrace = 5 * time.Second

// MessageWriter is the producing half of the Kafka seam (dead letters).
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
	Close() error
}

// Engine is the worker's runtime: it consumes fired tasks and takes each
// record through its lifecycle (lifecycle.go). Build it with New, then
// call Run once.
type Engine struct {
	cfg Config
	log *slog.Logger
	met *metrics

	fetching atomic.Bool
	leases   leaseWatch // concurrency slots' leases whose timer is not armed yet

	// set by Run
	store    Store
	claims   *claims
	finisher *finisher
	deadq    *deadLetters
	offs     *offsets
	sem      chan struct{}   // one per record held (fetched, not ended): Config.MaxHeld
	running  *sync.WaitGroup // every goroutine and item that holds records
	queue    runQueue        // admitted items waiting for a runner (runner.go)
	runners  *sync.WaitGroup // the runners
	// closed when no item runs any more: the runners exit
	stopRunners chan struct{}
	// heldBytes are the bytes of the records held (Config.MaxHeldBytes);
	// bytesFreed wakes a fetch loop that waits for them to fall below it
	heldBytes  atomic.Int64
	bytesFreed chan struct{}
}

// New checks cfg and builds an engine; its metrics are registered with
// cfg.Registerer now. It connects to nothing.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:  cfg,
		log:  cfg.Logger,
		met:  newMetrics(cfg.Registerer, cfg.MetricsMaxTypes),
		offs: newOffsets(),
	}, nil
}

// Fetching reports whether Run is consuming (for a readiness probe).
func (e *Engine) Fetching() bool { return e.fetching.Load() }

// Run is the consumer: fetch from r, take each record through its
// lifecycle with store, at most Concurrency handlers at once, commit
// finished offsets, write dead letters with dw. It returns once ctx ended
// and it shut down, with the fetch's error if the reader failed for good.
//
// Shutdown order, once ctx ends:
//  1. stop fetching;
//  2. wait for running handlers up to ShutdownTimeout, then cancel their
//     contexts (records not finished stay uncommitted: they run again on
//     another worker) and wait up to abandonGrace more;
//  3. commit what finished (meanwhile the queued dead letters are written
//     for at most deadDrain);
//  4. close the reader (leaves the group), then, after the dead letters,
//     the dead-letter writer.
//
// The store's client is the caller's; the caller closes it after Run
// returns.
func (e *Engine) Run(ctx context.Context, store Store, r kafkaread.Reader, dw MessageWriter) error {
	e.store = store
	e.claims = newClaims(store, e.cfg.Instance)
	e.finisher = newFinisher(store, e.outcomeAnswered)
	e.deadq = newDeadLetters(dw, e.cfg.DeadTopic, e.cfg.DeadLetterQueue, e.cfg.DeadLetterMaxAge, e.log, e.met)

	workCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	stopBackground := e.startBackground(ctx, workCtx, r)

	var handlers, runners sync.WaitGroup
	e.running = &handlers
	e.runners = &runners
	e.stopRunners = make(chan struct{})
	e.sem = make(chan struct{}, e.cfg.MaxHeld)
	e.bytesFreed = make(chan struct{}, 1)
	e.fetching.Store(true)
	fetchErr := e.fetchLoop(ctx, workCtx, r) // 1. until ctx ends
	e.fetching.Store(false)

	e.drain(abandon) // 2.
	deadWritten := stopBackground()

	// 3. commit what finished
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := e.commitNow(cctx, r); err != nil {
		e.log.Warn("final commit failed; finished records may be delivered again", "err", err)
	}
	cancel()

	// 4. close
	if err := r.Close(); err != nil {
		e.log.Warn("close kafka reader", "err", err)
	}
	deadWritten()
	if err := dw.Close(); err != nil {
		e.log.Warn("close kafka writer", "err", err)
	}
	e.log.Info("worker stopped")
	return fetchErr
}

// startBackground starts the loops beside the fetch loop: commits,
// reader stats and the pause reconciler (until fetching stops), claim
// releases, the finisher and the dead letters (until stopped). Its stop
// stops them once no record runs any more, in that order, except the
// dead letters: they are drained for at most deadDrain meanwhile, and the
// returned wait waits for them.
func (e *Engine) startBackground(ctx, workCtx context.Context, r kafkaread.Reader) (stop func() (deadWritten func())) {
	bgCtx, stopBG := context.WithCancel(workCtx)
	var bg sync.WaitGroup
	bg.Go(func() { e.commitLoop(bgCtx, r) })
	bg.Go(func() { e.statsLoop(bgCtx, r) })
	if e.cfg.Pause != nil {
		bg.Go(func() { e.reconcileLoop(ctx) }) // stops with fetching
	}
	stopReleases := make(chan struct{})
	var releases sync.WaitGroup
	releases.Go(func() { e.claims.releaseLoop(context.WithoutCancel(ctx), stopReleases) })
	stopFinisher := make(chan struct{})
	var fin sync.WaitGroup
	fin.Go(func() { e.finisher.run(context.WithoutCancel(ctx), stopFinisher) })
	stopDead := make(chan struct{})
	var dead sync.WaitGroup
	dead.Go(func() { e.deadq.run(context.WithoutCancel(ctx), stopDead, deadDrain) })
	return func() func() {
		stopBG()
		bg.Wait()
		close(stopFinisher)
		fin.Wait()
		close(stopReleases)
		releases.Wait()
		// dead letters queued by the handlers: written within deadDrain, or
		// dropped (their dead state is in Redis); meanwhile, and never waiting
		// for them, the final commit
		close(stopDead)
		return dead.Wait
	}
}

// drain waits for the running handlers up to ShutdownTimeout, then
// cancels their contexts (abandon) and waits up to abandonGrace more, and
// stops the runners.
func (e *Engine) drain(abandon context.CancelFunc) {
	e.log.Info("worker stopping: waiting for running handlers", "running", e.offs.running(), "timeout", e.cfg.ShutdownTimeout)
	ended := kafkaread.Drain(e.running, e.cfg.ShutdownTimeout)
	if !ended {
		e.log.Warn("shutdown timeout: cancelling running handlers; their records stay uncommitted", "running", e.offs.running())
		abandon()
		if ended = kafkaread.Drain(e.running, abandonGrace); !ended {
			e.log.Error("handlers did not return after cancellation", "running", e.offs.running())
		}
	}
	close(e.stopRunners)
	if ended {
		e.runners.Wait() // idle, about to return: a handler that never returns keeps its runner
	}
}

// RetryRedis runs op until it succeeds, fails with an error that is not
// "Redis unavailable", or ctx ends; it backs off 50ms..5s between tries,
// logging each failure as "redis: <what> failed; retrying".
func RetryRedis(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	return retryRedis(ctx, log, what, op)
}
