// Package embedded runs delayq's daemon inside a Go producer's process.
//
// A producer that schedules one task per call pays, through the daemon's
// HTTP API, two hops per call (producer → daemon → Redis). A Producer
// opened here is the daemon's own code in the producer's process: the same
// configuration (cmd/daemon's flags and DQ_* variables), the same
// validation and answers, the same group commit of concurrent single
// schedules into one Redis call, the same shard map, and the same durable
// journal when Redis is unreachable (a Journaled result, replayed when
// Redis answers again) — with one hop fewer and no HTTP or JSON on the
// way: a task is checked as Go values by the API's rules (a refused one
// gets the API's answer; a string that is not UTF-8, which JSON would
// have repaired, is refused naming its field). Schedule and ScheduleBatch
// are that path; Client is the rest of
// the API (Get, Cancel, Reschedule, dead letters, ...) through the
// daemon's handler in the same process, without a socket.
//
// What the producer takes on with it: reach to Redis (and etcd, Kafka
// where the daemon would use them), and a journal directory of its own on
// a disk that outlives the process (DQ_JOURNAL_DIR; one process per
// directory: a second Open of the same directory fails as locked). A
// journaled task is in that directory until Redis answers again.
//
// An embedded daemon binds no address and does not appear in the
// console's process list; Handler serves its /metrics, /healthz and
// /readyz (and the API) where the producer mounts it.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/daemon/wire"
)

// ErrClosed is returned by a Producer's calls after Close.
var ErrClosed = errors.New("delayq embedded: producer closed")

// Options configure Open.
type Options struct {
	// Args are cmd/daemon's flags, e.g. "-redis-addrs=10.0.0.5:6379"
	// (-http-addr and the HTTP TLS flags are not used).
	Args []string
	// Getenv reads the DQ_* variables, which flags override; nil:
	// os.Getenv.
	Getenv func(string) string
	// Logger receives the daemon's logs; nil: discarded.
	Logger *slog.Logger
}

// Producer is a daemon running in this process. Its methods are safe for
// concurrent use; concurrent Schedule calls share Redis calls.
type Producer struct {
	app    *daemon.App
	cancel context.CancelFunc
	done   chan error
	client *client.Client

	// every call holds mu for reading; Close takes it for writing, so
	// that the daemon stops only once no call is in flight (the HTTP
	// daemon drains its server first for the same reason)
	mu     sync.RWMutex
	closed bool
}

// Open validates the configuration, opens the journal, tries Redis once
// and starts the daemon's background parts. Redis being unreachable is
// not an error (schedules are journaled); a bad setting, a locked journal
// or a namespace of another bucket layout is. ctx bounds Open only: the
// producer runs until Close, which releases everything.
func Open(ctx context.Context, o Options) (*Producer, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var cfg daemon.Config
	b := config.NewBinder("daemon")
	cfg.Bind(b)
	if err := b.Parse(o.Args, getenv, io.Discard); err != nil {
		return nil, fmt.Errorf("delayq embedded: config: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	app, err := daemon.NewEmbedded(ctx, cfg, log.With("component", "delayq-embedded"))
	if err != nil {
		return nil, fmt.Errorf("delayq embedded: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Producer{app: app, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- app.Run(runCtx) }()
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: transport{p}}),
		client.WithoutScheduleCoalescing()} // the daemon's own group commit serves its single schedules
	if cfg.APIToken != "" {
		opts = append(opts, client.WithToken(cfg.APIToken))
	}
	p.client = client.New("http://delayq.embedded", opts...)
	return p, nil
}

// enter starts a call; false after Close.
func (p *Producer) enter() bool {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return false
	}
	return true
}

func (p *Producer) exit() { p.mu.RUnlock() }

// Schedule schedules one task. It returns once the task is stored in
// Redis, or journaled (Result.Journaled) while Redis is unreachable. A
// refused task's error is a *client.APIError with the status and code the
// HTTP API would answer (e.g. 422 invalid_task naming the field; also
// for a Payload that is not JSON); the task is then not stored.
func (p *Producer) Schedule(ctx context.Context, t client.Task) (client.Result, error) {
	if err := ctx.Err(); err != nil {
		return client.Result{}, err
	}
	if !p.enter() {
		return client.Result{}, ErrClosed
	}
	defer p.exit()
	f := fields(&t)
	s := p.app.ScheduleFields(ctx, &f)
	if s.Err != nil {
		return client.Result{}, apiError(s.Err)
	}
	return result(&s), nil
}

// fields is a task as the daemon's checks take it (wire.NewTask, the
// API's rules without JSON).
func fields(t *client.Task) wire.Fields {
	return wire.Fields{ID: t.ID, Type: t.Type, Payload: t.Payload, PayloadBytes: t.PayloadBytes,
		DueAt: t.DueAt, Delay: t.Delay, Topic: t.Topic, Key: t.Key, Headers: t.Headers,
		MaxAttempts: t.MaxAttempts, Timeout: t.Timeout, Priority: t.Priority}
}

// ScheduleBatch schedules tasks in one store call (at most DQ_MAX_BATCH).
// The results are in the order of tasks, a refused task's with Err set;
// the error is set only when nothing was scheduled (the batch is too
// large, ctx ended, Close).
func (p *Producer) ScheduleBatch(ctx context.Context, tasks []client.Task) ([]client.BatchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.exit()
	if e := p.app.CheckBatch(len(tasks)); e != nil {
		return nil, apiError(e)
	}
	fs := make([]wire.Fields, len(tasks))
	for i := range tasks {
		fs[i] = fields(&tasks[i])
	}
	out := make([]client.BatchResult, len(tasks))
	for i, s := range p.app.ScheduleFieldsBatch(ctx, fs) {
		if s.Err != nil {
			out[i].Err = apiError(s.Err)
			continue
		}
		out[i].Result = result(&s)
	}
	return out, nil
}

// Client is the daemon's whole API (Get, Cancel, Reschedule, Stats, dead
// letters, ...) served by this process' daemon without a socket. Its
// Schedule works too but goes through the API's JSON; Producer.Schedule
// is the direct path.
func (p *Producer) Client() *client.Client { return p.client }

// Handler is the daemon's HTTP handler: the API, /healthz, /readyz (with
// its reasons) and /metrics, for the producer to serve where it wants.
func (p *Producer) Handler() http.Handler { return p.app.Handler() }

// JournalDepth is the number of journaled schedules waiting for Redis.
func (p *Producer) JournalDepth() int { return p.app.JournalDepth() }

// Close waits for the calls in flight, stops the daemon (a journal replay
// in progress finishes its batch) and releases the journal and the Redis
// client. Journaled tasks stay in the journal directory for the next Open.
// Later calls return ErrClosed; Close is idempotent.
func (p *Producer) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	p.cancel()
	err := <-p.done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// result is the answer the HTTP API would give (its due_at has millisecond
// precision, in UTC).
func result(s *wire.Scheduled) client.Result {
	return client.Result{ID: s.ID, State: string(s.State), Outcome: s.Outcome,
		DueAt: s.DueAt.UTC().Truncate(time.Millisecond), Shard: s.Shard, Kept: s.Kept}
}

func apiError(e *wire.Error) *client.APIError {
	return &client.APIError{Status: e.Status, Code: e.Code, Message: e.Message}
}
