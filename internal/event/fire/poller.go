package fire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// Store is what a poller needs from the task store: the fenced leader
// transitions of one shard.
type Store interface {
	Adopt(ctx context.Context, shard int, token int64) (int, error)
	TakeAhead(ctx context.Context, shard int, token int64, limit int, lease, ahead time.Duration) (redisstore.Taken, error)
	Settle(ctx context.Context, shard int, token int64, lease string, failed []redisstore.Fired) (fired, released int, err error)
	SettleAcks(ctx context.Context, shard int, token int64, lease string, failed []redisstore.Fired, acks []redisstore.Ack) (redisstore.Settled, error)
	SettlePoison(ctx context.Context, shard int, token int64, lease string, tasks []redisstore.Poison) ([]redisstore.PoisonOutcome, error)
}

// Config configures one poller (one leadership of one shard).
type Config struct {
	Store    Store
	Producer Producer
	Shard    int
	Token    int64
	// Batch is the most tasks per take (default 500).
	Batch int
	// Depth is how many taken batches may be in flight (produce, then
	// settle) at once (default 16): a task that falls due while earlier
	// batches are being written is taken and written right away, and a
	// broker that stalls for a few tens of ms does not hold the takes back.
	Depth int
	// Lease is how long a claim lasts before another take may re-claim it
	// (default 30s).
	Lease time.Duration
	// IdlePoll is the longest sleep between takes (default 5s).
	IdlePoll time.Duration
	// Ahead is how long before its due time the shard's next task is
	// taken (0: when due). The take's round trip (the script and, with
	// appendfsync always, Redis' fsync) then runs while the task is not
	// due yet, and the batch waits in the process until the due instant
	// (Redis' clock) to be produced: never early, and on time even when
	// the take is slow. A task taken ahead is fired: a cancel or a
	// reschedule in that window answers that it fired.
	Ahead time.Duration
	// DefaultTopic is used for tasks without a topic; DeadTopic receives
	// records that cannot be fired to their own.
	DefaultTopic, DeadTopic string
	// Worked tells whether delayq work processes handle a topic (the
	// worked-topics view, internal/worked). A task fired to a topic that
	// is not worked ends delivered once Kafka acknowledged it. nil: every
	// topic is worked (nothing ends delivered).
	Worked func(topic string) bool
	// Wake interrupts sleeps early; nil: idle poll only.
	Wake *Mailbox
	// Stop asks the poller to return after the batches in hand (give-back).
	Stop <-chan struct{}
	// ValidUntil says until when leadership is surely valid; the poller
	// starts no take past it. nil: always.
	ValidUntil func() time.Time
	// SettleTimeout bounds the settle after a produce (default 5s).
	SettleTimeout time.Duration
	// PoisonGrace is how long a task Kafka refuses for good (Refusal:
	// unknown topic, too large, ...) keeps being fired again, counted from
	// its first refusal seen by this poller, before it is made dead in
	// Redis (default 30s): a topic created meanwhile still gets it. While
	// in grace it is parked (back in the due set a little later) instead of
	// holding its shard back.
	PoisonGrace time.Duration
	// Outcomes, when set, receives a "dead" outcome record for every task
	// made dead at fire time, once SettlePoison stored it (best effort: it
	// must not block; *outcome.Publisher, nil-safe, is one).
	Outcomes OutcomePublisher
	// DeliveredOutcomes makes Outcomes receive a "delivered" outcome
	// record (with the receipt) for every task that ends delivered.
	DeliveredOutcomes bool
	Metrics           *Metrics
	Log               *slog.Logger
}

// OutcomePublisher takes outcome records without blocking.
type OutcomePublisher interface {
	Publish(o record.OutcomeRecord) bool
}

// Poller fires the due tasks of one led shard.
type Poller struct {
	cfg Config
	log *slog.Logger

	// The fields below belong to Run's goroutine.
	results     chan batchResult // finished batches; buffered Depth
	inflight    int
	kafkaFailed bool // a batch came back with records Kafka did not confirm
	kafkaRetry  retry.Backoff
	fenced      bool

	poison *poisonTracker // shared with the batches' goroutines
}

// batchResult is what a batch in flight reports when it is done.
type batchResult struct {
	failed int   // records Kafka did not confirm (released)
	err    error // wraps redisstore.ErrFenced when the settle was refused
}

// NewPoller returns a poller; Run starts it.
func NewPoller(cfg Config) *Poller {
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 16
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.IdlePoll <= 0 {
		cfg.IdlePoll = 5 * time.Second
	}
	if cfg.DefaultTopic == "" {
		cfg.DefaultTopic = task.DefaultTopic
	}
	if cfg.DeadTopic == "" {
		cfg.DeadTopic = "dq.dead"
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 5 * time.Second
	}
	if cfg.PoisonGrace <= 0 {
		cfg.PoisonGrace = 30 * time.Second
	}
	// the take script counts whole milliseconds
	cfg.Ahead = max(cfg.Ahead.Truncate(time.Millisecond), 0)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Poller{
		cfg: cfg, log: log.With("shard", cfg.Shard, "token", cfg.Token),
		results:    make(chan batchResult, cfg.Depth),
		kafkaRetry: retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second},
		poison:     newPoisonTracker(cfg.PoisonGrace, cfg.Metrics),
	}
	return p
}

// errStop ends Run without an error (give-back or leadership over).
var errStop = errors.New("stop")

// Run adopts the shard and fires its due tasks until ctx ends (leadership
// lost: stop at once; a produce in flight is cancelled and its tasks
// released), Stop is closed (the batches in hand are produced and acked,
// then Run returns nil) or the store refuses the token (Run returns an
// error wrapping redisstore.ErrFenced). Run returns only after every batch
// it started is done.
func (p *Poller) Run(ctx context.Context) (err error) {
	defer func() {
		defer p.poison.close()
		if derr := p.drain(); derr != nil && (err == nil || errors.Is(err, errStop)) {
			err = derr
		}
		if errors.Is(err, errStop) {
			err = nil
		}
	}()
	if err := p.adopt(ctx); err != nil {
		return err
	}
	storeRetry := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		if err := p.check(ctx); err != nil {
			return err
		}
		if p.kafkaFailed {
			// Kafka failed: those tasks are back in the due set; wait
			// before taking again, longer while it keeps failing.
			p.kafkaFailed = false
			if err := p.pause(ctx, p.kafkaRetry.Next()); err != nil {
				return err
			}
			continue
		}
		if err := p.waitValid(ctx); err != nil {
			return err
		}
		if p.cfg.Wake != nil {
			p.cfg.Wake.Disarm()
		}
		takeAt := time.Now()
		taken, err := p.cfg.Store.TakeAhead(ctx, p.cfg.Shard, p.cfg.Token, p.cfg.Batch, p.cfg.Lease, p.cfg.Ahead)
		replyAt := time.Now()
		if err != nil {
			if err := p.storeFailed(ctx, "take", err); err != nil {
				return err
			}
			if err := p.pause(ctx, storeRetry.Next()); err != nil {
				return err
			}
			continue
		}
		storeRetry.Reset()
		n := len(taken.Tasks)
		if n > 0 {
			p.launch(ctx, taken, takeAt, replyAt)
			for p.inflight >= p.cfg.Depth {
				if err := p.handle(<-p.results); err != nil {
					return err
				}
			}
			if n == p.cfg.Batch {
				continue // more may be due right now
			}
		}
		if err := p.sleep(ctx, taken, replyAt, n == 0); err != nil {
			return err
		}
	}
}

// check takes in finished batches, then returns errStop when the poller
// should end.
func (p *Poller) check(ctx context.Context) error {
	for drained := false; !drained; {
		select {
		case r := <-p.results:
			if err := p.handle(r); err != nil {
				return err
			}
		default:
			drained = true
		}
	}
	if ctx.Err() != nil {
		return errStop
	}
	select {
	case <-p.cfg.Stop:
		return errStop
	default:
		return nil
	}
}

// handle takes in one finished batch.
func (p *Poller) handle(r batchResult) error {
	p.inflight--
	if r.err != nil {
		if errors.Is(r.err, redisstore.ErrFenced) {
			return p.fencedErr("settle", r.err)
		}
		return r.err
	}
	if r.failed > 0 {
		p.kafkaFailed = true
	} else {
		p.kafkaRetry.Reset()
	}
	return nil
}

// drain waits for every batch in flight.
func (p *Poller) drain() error {
	var first error
	for p.inflight > 0 {
		if err := p.handle(<-p.results); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// adopt raises the fence and makes an earlier leader's leases run out now,
// retrying while Redis is unreachable.
func (p *Poller) adopt(ctx context.Context) error {
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		moved, err := p.cfg.Store.Adopt(ctx, p.cfg.Shard, p.cfg.Token)
		if err == nil {
			if moved > 0 {
				// the takes that re-claim them count them (LeaseReclaims)
				p.log.Info("adopted shard: re-firing tasks an earlier leader left in flight", "tasks", moved)
			}
			return nil
		}
		if err := p.storeFailed(ctx, "adopt", err); err != nil {
			return err
		}
		if err := p.pause(ctx, bo.Next()); err != nil {
			return err
		}
	}
}

// storeFailed handles a failed store call: fenced ends the poller, an
// ended context stops it, anything else is logged and retried.
func (p *Poller) storeFailed(ctx context.Context, op string, err error) error {
	if errors.Is(err, redisstore.ErrFenced) {
		return p.fencedErr(op, err)
	}
	if ctx.Err() != nil {
		return errStop
	}
	if m := p.cfg.Metrics; m != nil {
		m.StoreErrors.Inc()
	}
	p.log.Warn("store call failed; retrying", "op", op, "err", err, "unavailable", redisstore.IsUnavailable(err))
	return nil
}

// fencedErr counts (once per poller) and logs a refused token.
func (p *Poller) fencedErr(op string, err error) error {
	if !p.fenced {
		p.fenced = true
		if m := p.cfg.Metrics; m != nil {
			m.Fenced.Inc()
		}
		p.log.Warn("fenced: a newer leader owns the shard; stepping down", "op", op, "err", err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// pause waits d, or until the poller should end (not woken by wake-ups).
func (p *Poller) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return errStop
		case <-p.cfg.Stop:
			return errStop
		case r := <-p.results:
			if err := p.handle(r); err != nil {
				return err
			}
		}
	}
}

// waitValid holds the next take while leadership is not surely valid (no
// keep-alive answer for a while): the lease may have expired on the etcd
// server and another process may lead already.
func (p *Poller) waitValid(ctx context.Context) error {
	if p.cfg.ValidUntil == nil {
		return nil
	}
	logged := false
	for time.Until(p.cfg.ValidUntil()) <= 0 {
		if !logged {
			p.log.Warn("etcd lease not confirmed lately; holding takes")
			logged = true
		}
		if err := p.pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits until Ahead before the shard's next due task or until the
// next lease deadline (Redis time, relative to the take's Now), at most
// IdlePoll, or a wake-up, or a batch that Kafka failed.
func (p *Poller) sleep(ctx context.Context, taken redisstore.Taken, replyAt time.Time, idle bool) error {
	if p.kafkaFailed {
		return nil // back off first
	}
	d := p.cfg.IdlePoll
	if taken.PurgeMore {
		d = redisstore.PurgeAgain // finished records wait for their purge
	}
	if !taken.NextDue.IsZero() {
		d = min(d, taken.NextDue.Add(-p.cfg.Ahead).Sub(taken.Now))
	}
	if !taken.NextLease.IsZero() {
		d = min(d, taken.NextLease.Sub(taken.Now))
	}
	elapsed := time.Since(replyAt)
	if d-elapsed <= 0 {
		if !idle || d > 0 {
			// more is due, or the next task fell due while the reply
			// was on its way (Now is to the microsecond): take now
			return nil
		}
		// Nothing was claimed although something was due already: do
		// not spin on Redis.
		d = elapsed + time.Millisecond
	}
	var wake <-chan struct{}
	if p.cfg.Wake != nil {
		// a task due before what the sleep's end takes wakes it
		p.cfg.Wake.Arm(task.Millis(taken.Now.Add(d + p.cfg.Ahead)))
		wake = p.cfg.Wake.C()
	}
	t := time.NewTimer(d - elapsed)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-wake:
			return nil
		case <-ctx.Done():
			return errStop
		case <-p.cfg.Stop:
			return errStop
		case r := <-p.results:
			if err := p.handle(r); err != nil {
				return err
			}
			if p.kafkaFailed {
				return nil
			}
		}
	}
}
