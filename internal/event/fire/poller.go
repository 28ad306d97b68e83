package fire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/fault"
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

// Hooks let tests watch and pause pollers. Every field may be nil.
type Hooks struct {
	// Started runs after Adopt, before the first take.
	Started func(shard int, token int64)
	// BeforeTake runs before every take.
	BeforeTake func(shard int, token int64)
	// BeforeAck runs after Kafka answered, before the settle; it may block
	// (a paused leader). It runs on the batch's goroutine.
	BeforeAck func(ctx context.Context, shard int, token int64, tasks []*task.Task)
	// Stopped runs when Run returns, after every batch finished.
	Stopped func(shard int, token int64, err error)
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
	Hooks             *Hooks
}

// OutcomePublisher takes outcome records without blocking.
type OutcomePublisher interface {
	Publish(o record.OutcomeRecord) bool
}

// Poller fires the due tasks of one led shard.
type Poller struct {
	cfg   Config
	log   *slog.Logger
	hooks Hooks

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
	if cfg.Hooks != nil {
		p.hooks = *cfg.Hooks
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
		if p.hooks.Stopped != nil {
			p.hooks.Stopped(p.cfg.Shard, p.cfg.Token, err)
		}
	}()
	if err := p.adopt(ctx); err != nil {
		return err
	}
	if p.hooks.Started != nil {
		p.hooks.Started(p.cfg.Shard, p.cfg.Token)
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
		if p.hooks.BeforeTake != nil {
			p.hooks.BeforeTake(p.cfg.Shard, p.cfg.Token)
		}
		if p.cfg.Wake != nil {
			p.cfg.Wake.Disarm()
		}
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
			p.launch(ctx, taken, replyAt)
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

// launch starts a batch: wait for its due instant when it was taken ahead,
// produce, then settle (release what Kafka did not confirm, the rest is
// fired), on its own goroutine; the result comes back on p.results.
func (p *Poller) launch(ctx context.Context, taken redisstore.Taken, replyAt time.Time) {
	m := p.cfg.Metrics
	if m != nil {
		m.BatchSize.Observe(float64(len(taken.Tasks)))
	}
	if m != nil && taken.Reclaimed > 0 {
		m.LeaseReclaims.Add(float64(taken.Reclaimed))
	}
	p.inflight++
	go func() {
		if !taken.FireAt.IsZero() {
			// Redis' clock is at least taken.Now plus what passed since
			// the reply (the script ran before it), so waiting this long
			// on the local monotonic clock reaches FireAt by Redis' clock
			// whatever the clocks' offset. A lost leadership cancels
			// the wait; fire then releases the batch.
			waitUntil(ctx, replyAt.Add(taken.FireAt.Sub(taken.Now)))
		}
		// The fire time by Redis' clock: the take's TIME plus what passed
		// since its reply. Never before a due time, whatever the local
		// clock.
		firedAt := taken.Now.Add(time.Since(replyAt)).Truncate(time.Millisecond)
		p.results <- p.fire(ctx, taken, firedAt)
	}()
}

// waitUntil sleeps until the local time at, or until ctx ends.
func waitUntil(ctx context.Context, at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fire produces one take's tasks, then settles the take: what Kafka did
// not confirm is released, the rest is fired. It touches no state of Run's
// goroutine.
func (p *Poller) fire(ctx context.Context, taken redisstore.Taken, firedAt time.Time) batchResult {
	t0 := time.Now() // firedAt on the local clock
	tasks := taken.Tasks
	m := p.cfg.Metrics
	msgs := make([]kafka.Message, len(tasks))
	dead := make([]bool, len(tasks))
	for i, t := range tasks {
		if t.LastError != "" && t.Type == "" {
			// The record could not be read: it goes to the dead-letter
			// topic and is acked, so that it never blocks the shard.
			msgs[i] = record.EncodeDead(t, p.cfg.DeadTopic, firedAt, t.LastError)
			dead[i] = true
			continue
		}
		msgs[i] = record.Encode(t, p.cfg.DefaultTopic, firedAt)
	}
	shard, token := record.Fence(p.cfg.Shard, p.cfg.Token)
	for i := range msgs {
		msgs[i].Headers = append(msgs[i].Headers, shard, token)
	}

	fault.Point("after-take")
	if fault.Plant("earlyack") {
		// planted bug (test builds only): ack before Kafka confirmed
		_, _, _ = p.cfg.Store.Settle(ctx, p.cfg.Shard, p.cfg.Token, taken.Lease, nil)
	}
	var errs []error
	if ctx.Err() == nil {
		start := time.Now()
		errs = p.cfg.Producer.Produce(ctx, msgs)
		fault.Point("after-produce")
		if m != nil {
			m.ProduceDuration.Observe(time.Since(start).Seconds())
		}
	} else {
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	if p.hooks.BeforeAck != nil {
		p.hooks.BeforeAck(ctx, p.cfg.Shard, p.cfg.Token, tasks)
	}
	fault.Point("before-ack")

	// Records Kafka refuses for good (Refusal) are settled one by one,
	// before the take: parked while their grace runs, then dead. They
	// never make the poller back off: the rest of the shard fires on time.
	var poison []redisstore.Poison
	var pidx []int
	var classes []string
	if ctx.Err() == nil {
		for i, e := range errs {
			if e == nil || dead[i] {
				continue
			}
			class := Refusal(e)
			if class == "" {
				continue
			}
			t := tasks[i]
			first, n, isNew := p.poison.refused(redisstore.Fired{ID: t.ID, Gen: t.Gen}, firedAt)
			deadAfter := first.Add(p.cfg.PoisonGrace)
			reason := fmt.Sprintf("kafka refused the record for topic %q for good (%s): %v", msgs[i].Topic, class, e)
			if isNew {
				p.log.Warn("kafka refused a record for good; firing it again until its grace ends, then it is dead",
					"task_id", t.ID, "topic", msgs[i].Topic, "reason", class, "err", e, "dead_after", deadAfter)
			}
			pz := redisstore.Poison{
				ID: t.ID, Gen: t.Gen, DeadAfter: deadAfter, Reason: reason,
				Park: parkFor(n, deadAfter.Sub(firedAt)),
			}
			// Redis' now when SettlePoison runs is about firedAt plus
			// what passed since; a second of margin for the clocks' rates.
			if class == RefusedUnknownTopic && !firedAt.Add(time.Since(t0)+time.Second).Before(deadAfter) &&
				p.topicMayExist(ctx, msgs[i].Topic) {
				// created meanwhile, not seen by the writer yet: not dead
				pz.DeadAfter, pz.Park = time.Time{}, parkFor(n, time.Hour)
			}
			poison = append(poison, pz)
			pidx = append(pidx, i)
			classes = append(classes, class)
		}
	}
	// The settles run even when leadership just ended: the fence refuses
	// them if a newer leader adopted the shard meanwhile, and otherwise
	// they spare a duplicate.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.SettleTimeout)
	defer cancel()
	settled := make([]bool, len(tasks)) // poison settled by SettlePoison
	var deadMsgs []kafka.Message
	if len(poison) > 0 {
		outs, err := p.cfg.Store.SettlePoison(sctx, p.cfg.Shard, p.cfg.Token, taken.Lease, poison)
		if errors.Is(err, redisstore.ErrFenced) {
			return batchResult{err: fmt.Errorf("settle poison: %w", err)}
		}
		if err != nil {
			// released with the others below; the poller backs off
			if m != nil {
				m.StoreErrors.Inc()
			}
			p.log.Warn("could not settle records kafka refused; releasing them", "tasks", len(poison), "err", err)
		}
		for j, o := range outs {
			i := pidx[j]
			t := tasks[i]
			settled[i] = true
			switch o {
			case redisstore.PoisonParked:
				continue
			case redisstore.PoisonDead:
				p.log.Warn("task is dead: kafka refused its record for good until its grace ended",
					"task_id", t.ID, "topic", msgs[i].Topic, "reason", classes[j], "err", errs[i])
				if m != nil {
					m.DeadAtFire.WithLabelValues(classes[j]).Inc()
				}
				deadMsgs = append(deadMsgs, record.EncodeDead(t, p.cfg.DeadTopic, firedAt, poison[j].Reason))
				p.publishDead(t, poison[j].Reason)
			}
			p.poison.forget(redisstore.Fired{ID: t.ID, Gen: t.Gen})
		}
	}

	p.poison.fired(tasks, errs)
	var rels []redisstore.Fired
	var acks []redisstore.Ack
	var deliv []int // the tasks whose Ack asks to end delivered, in order
	acked, retriable := 0, 0
	for i, t := range tasks {
		if errs[i] == nil {
			acked++
			if !dead[i] {
				a := redisstore.Ack{
					ID: t.ID, Gen: t.Gen, Attempt: max(t.Attempt, 1), DueAt: t.DueAt, FiredAt: firedAt,
					Partition: int32(msgs[i].Partition), Offset: msgs[i].Offset, Token: p.cfg.Token,
					Delivered: p.cfg.Worked != nil && !p.cfg.Worked(msgs[i].Topic),
				}
				if a.Delivered {
					deliv = append(deliv, i)
				}
				acks = append(acks, a)
			}
			if m != nil {
				if dead[i] {
					m.DeadLettered.Inc()
				} else {
					m.Lag.Observe(max(firedAt.Sub(t.DueAt), 0).Seconds())
				}
			}
			continue
		}
		if settled[i] {
			continue
		}
		retriable++
		rels = append(rels, redisstore.Fired{ID: t.ID, Gen: t.Gen})
	}
	if m != nil {
		m.Fired.Add(float64(acked))
		m.ProduceErrors.Add(float64(len(tasks) - acked))
	}
	if len(rels) > 0 && ctx.Err() == nil {
		p.log.Warn("kafka did not confirm records; releasing them to fire again",
			"failed", len(rels), "of", len(tasks), "err", firstRetriable(errs, settled))
	}
	r := batchResult{failed: retriable}
	var stored bool
	stored, r.err = p.settle(sctx, taken, rels, acks)
	if stored {
		if m != nil {
			m.Receipts.Add(float64(len(acks)))
			m.Delivered.Add(float64(len(deliv)))
		}
		if p.cfg.DeliveredOutcomes {
			for _, i := range deliv {
				p.publishDelivered(tasks[i], msgs[i], firedAt)
			}
		}
	}
	if r.err == nil && len(deadMsgs) > 0 {
		p.notifyDead(sctx, deadMsgs)
	}
	return r
}

// publishDead hands the "dead" outcome record of t, made dead at fire
// time for reason, to Config.Outcomes.
func (p *Poller) publishDead(t *task.Task, reason string) {
	o := p.outcomeOf(t, record.OutcomeDead, time.Now().UTC())
	o.Error = reason
	p.publish(o)
}

// publishDelivered hands the "delivered" outcome record of t, whose
// record msg Kafka acknowledged at firedAt, to Config.Outcomes.
func (p *Poller) publishDelivered(t *task.Task, msg kafka.Message, firedAt time.Time) {
	o := p.outcomeOf(t, record.OutcomeDelivered, firedAt)
	o.FiredAt, o.Partition, o.Offset = firedAt, int32(msg.Partition), msg.Offset
	p.publish(o)
}

// outcomeOf is the outcome record of t that the event process publishes.
func (p *Poller) outcomeOf(t *task.Task, outcome string, at time.Time) record.OutcomeRecord {
	var hs map[string]string
	if len(t.Headers) > 0 {
		hs = t.Headers
	}
	return record.OutcomeRecord{
		ID: t.ID, Type: t.Type, Outcome: outcome,
		Attempt: max(t.Attempt, 1), MaxAttempts: t.Attempts(),
		DueAt: t.DueAt, FinishedAt: at, Shard: p.cfg.Shard, Headers: hs,
	}
}

// publish hands o to Config.Outcomes, if any.
func (p *Poller) publish(o record.OutcomeRecord) {
	if p.cfg.Outcomes != nil {
		p.cfg.Outcomes.Publish(o)
	}
}

// topicExister is what a Producer may offer to check a topic without its
// metadata cache (Kafka does).
type topicExister interface {
	TopicExists(ctx context.Context, topic string) (bool, error)
}

// topicMayExist asks the producer, when it can tell, whether topic exists
// after all (an error counts as "may": a task is never made dead for a
// missing topic on a guess).
func (p *Poller) topicMayExist(ctx context.Context, topic string) bool {
	te, ok := p.cfg.Producer.(topicExister)
	if !ok {
		return false
	}
	exists, err := te.TopicExists(ctx, topic)
	if err != nil {
		p.log.Warn("could not check whether a topic exists; the task stays in grace", "topic", topic, "err", err)
		return true
	}
	return exists
}

// notifyDead writes the dead-letter records of tasks made dead at fire
// time: a best-effort notification (the task is dead in Redis already,
// listed and redrivable), tried once, after the settle.
func (p *Poller) notifyDead(ctx context.Context, msgs []kafka.Message) {
	errs := p.cfg.Producer.Produce(ctx, msgs)
	failed := 0
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	if m := p.cfg.Metrics; m != nil {
		m.DeadLettered.Add(float64(len(msgs) - failed))
		m.DeadNotifyErrors.Add(float64(failed))
	}
	if failed > 0 {
		p.log.Warn("could not write dead-letter records; the tasks are dead in Redis regardless",
			"topic", p.cfg.DeadTopic, "failed", failed, "err", firstErr(errs))
	}
}

// parkFor is how long a refused task waits before it is fired again after
// its n-th refusal: 100ms doubling to at most 2s, and never past the end
// of its grace (so that it is made dead on time).
func parkFor(n int, left time.Duration) time.Duration {
	d := 2 * time.Second
	if n < 5 {
		d = 100 * time.Millisecond << max(n-1, 0)
	}
	return max(min(d, left), time.Millisecond)
}

// poisonTracker remembers when a poller first saw Kafka refuse each task
// (by generation) for good, for its grace. Entries not refused again
// within the grace plus a minute are dropped (the task was cancelled,
// rescheduled or fired meanwhile).
type poisonTracker struct {
	grace time.Duration
	m     *Metrics

	size   atomic.Int64 // len(seen), read without the lock
	mu     sync.Mutex
	seen   map[redisstore.Fired]*poisonEntry
	pruned time.Time
}

type poisonEntry struct {
	first, last time.Time
	n           int
}

func newPoisonTracker(grace time.Duration, m *Metrics) *poisonTracker {
	return &poisonTracker{grace: grace, m: m, seen: map[redisstore.Fired]*poisonEntry{}}
}

// refused records a refusal at (Redis' clock) and returns the first one's
// time, how many there were, and whether this is the first.
func (pt *poisonTracker) refused(f redisstore.Fired, at time.Time) (first time.Time, n int, isNew bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if at.Sub(pt.pruned) > pt.grace {
		pt.pruned = at
		for k, e := range pt.seen {
			if at.Sub(e.last) > pt.grace+time.Minute {
				pt.drop(k)
			}
		}
	}
	e, ok := pt.seen[f]
	if !ok {
		e = &poisonEntry{first: at}
		pt.seen[f] = e
		pt.size.Add(1)
		if pt.m != nil {
			pt.m.PoisonGrace.Inc()
		}
	}
	e.last = at
	e.n++
	return e.first, e.n, !ok
}

// fired forgets the tasks of a batch that Kafka confirmed (a topic was
// created within their grace); nearly free while nothing is tracked.
func (pt *poisonTracker) fired(tasks []*task.Task, errs []error) {
	if pt.size.Load() == 0 {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for i, t := range tasks {
		if errs[i] == nil {
			pt.drop(redisstore.Fired{ID: t.ID, Gen: t.Gen})
		}
	}
}

func (pt *poisonTracker) forget(f redisstore.Fired) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.drop(f)
}

func (pt *poisonTracker) drop(f redisstore.Fired) {
	if _, ok := pt.seen[f]; ok {
		delete(pt.seen, f)
		pt.size.Add(-1)
		if pt.m != nil {
			pt.m.PoisonGrace.Dec()
		}
	}
}

// close forgets everything (the poller ended: a next leader starts the
// grace again).
func (pt *poisonTracker) close() {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for k := range pt.seen {
		pt.drop(k)
	}
}

func firstRetriable(errs []error, settled []bool) error {
	for i, e := range errs {
		if e != nil && !settled[i] {
			return e
		}
	}
	return nil
}

// settle releases the claims Kafka did not confirm and makes the rest of
// the take fired (Store.Settle: one script call), retrying a little while
// Redis is unreachable; claims it could not settle come back when their
// lease runs out (a later take re-claims them: Taken.Reclaimed).
func (p *Poller) settle(ctx context.Context, taken redisstore.Taken, failed []redisstore.Fired, acks []redisstore.Ack) (stored bool, err error) {
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		r, err := p.cfg.Store.SettleAcks(ctx, p.cfg.Shard, p.cfg.Token, taken.Lease, failed, acks)
		if err == nil {
			return r.Stored, nil
		}
		if errors.Is(err, redisstore.ErrFenced) {
			return false, fmt.Errorf("settle: %w", err)
		}
		if m := p.cfg.Metrics; m != nil {
			m.StoreErrors.Inc()
		}
		if ctx.Err() != nil || !retry.Sleep(ctx, bo.Next()) {
			p.log.Error("could not settle claims; they fire again when their lease ends",
				"tasks", len(taken.Tasks), "released", len(failed), "err", err, "lease", p.cfg.Lease)
			return false, nil
		}
	}
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
