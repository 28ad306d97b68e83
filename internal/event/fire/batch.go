package fire

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/tracing"
)

// The path of one take, on its own goroutine (launch, then fire):
//
//  1. wait for the due instant when it was taken ahead (launch);
//  2. encode a record per task, fenced with the shard and token (encode);
//  3. produce them in one synchronous batch (produce);
//  4. the records Kafka refused for good are settled one by one: parked
//     while their grace runs, then dead (refusals, settlePoison);
//  5. settle the take: what Kafka did not confirm is released, the rest is
//     fired with a receipt, or delivered (settleTake);
//  6. after the settle, publish the outcome records and notify the dead
//     tasks on the dead-letter topic.

// batch is one take on its way through fire. It belongs to the batch's
// goroutine and touches no state of Run's.
type batch struct {
	taken   redisstore.Taken
	firedAt time.Time // the fire time, by Redis' clock
	start   time.Time // firedAt on the local clock
	msgs    []kafka.Message
	dead    []bool     // unreadable records: written to the dead-letter topic
	errs    []error    // Kafka's answer, per record
	settled []bool     // settled by SettlePoison (parked or dead)
	stored  bool       // the take's settle was stored (SettleAcks)
	tr      *fireTrace // the batch's spans; nil unless tracing is on (trace.go)
}

// refusal is a record of a batch that Kafka refused for good.
type refusal struct {
	i     int    // its index in the batch
	class string // Refusal's class
}

// launch starts a batch: wait for its due instant when it was taken ahead,
// produce, then settle (release what Kafka did not confirm, the rest is
// fired), on its own goroutine; the result comes back on p.results.
//
// takeAt is when the take was asked for, replyAt when its reply came (the
// local clock).
func (p *Poller) launch(ctx context.Context, taken redisstore.Taken, takeAt, replyAt time.Time) {
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
		p.results <- p.fire(ctx, taken, takeAt, firedAt)
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

// fire produces one take's tasks, then settles the take: what Kafka
// refused for good is parked or dead, what it did not confirm is
// released, the rest is fired. While tracing is on, the batch's spans
// (trace.go) start at takeAt and end with it.
func (p *Poller) fire(ctx context.Context, taken redisstore.Taken, takeAt, firedAt time.Time) (r batchResult) {
	b := p.encode(taken, firedAt)
	if tracing.On() {
		p.startTrace(ctx, b, takeAt)
		defer func() { p.endTrace(b, r) }()
	}
	p.produce(ctx, b)
	b.tr.produced(b)
	poison, refused := p.refusals(ctx, b)
	// The settles run even when leadership just ended: the fence refuses
	// them if a newer leader adopted the shard meanwhile, and otherwise
	// they spare a duplicate.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.SettleTimeout)
	defer cancel()
	deadMsgs, err := p.settlePoison(sctx, b, poison, refused)
	if err != nil {
		return batchResult{err: err}
	}
	p.poison.fired(taken.Tasks, b.errs)
	r = p.settleTake(ctx, sctx, b)
	if r.err == nil && len(deadMsgs) > 0 {
		b.tr.deadNotified(p.notifyDead(sctx, deadMsgs))
	}
	return r
}

// encode builds the batch's records, fenced with the shard and token.
func (p *Poller) encode(taken redisstore.Taken, firedAt time.Time) *batch {
	tasks := taken.Tasks
	b := &batch{
		taken: taken, firedAt: firedAt, start: time.Now(),
		msgs: make([]kafka.Message, len(tasks)), dead: make([]bool, len(tasks)),
		settled: make([]bool, len(tasks)),
	}
	for i, t := range tasks {
		if t.LastError != "" && t.Type == "" {
			// The record could not be read: it goes to the dead-letter
			// topic and is acked, so that it never blocks the shard.
			b.msgs[i] = record.EncodeDead(t, p.cfg.DeadTopic, firedAt, t.LastError)
			b.dead[i] = true
			continue
		}
		b.msgs[i] = record.Encode(t, p.cfg.DefaultTopic, firedAt)
	}
	shard, token := record.Fence(p.cfg.Shard, p.cfg.Token)
	for i := range b.msgs {
		b.msgs[i].Headers = append(b.msgs[i].Headers, shard, token)
	}
	return b
}

// produce writes the batch's records to Kafka and keeps its answer per
// record; with leadership lost already, nothing is written and every
// record counts as failed (released by the settle).
func (p *Poller) produce(ctx context.Context, b *batch) {
	faultPoint("after-take")
	if plantEarlyAck() {
		// planted bug (test builds only): ack before Kafka confirmed
		_, _, _ = p.cfg.Store.Settle(ctx, p.cfg.Shard, p.cfg.Token, b.taken.Lease, nil)
	}
	if err := ctx.Err(); err != nil {
		b.errs = make([]error, len(b.msgs))
		for i := range b.errs {
			b.errs[i] = err
		}
	} else {
		start := time.Now()
		b.errs = p.cfg.Producer.Produce(ctx, b.msgs)
		faultPoint("after-produce")
		if m := p.cfg.Metrics; m != nil {
			m.ProduceDuration.Observe(time.Since(start).Seconds())
		}
	}
	faultPoint("before-ack")
}

// refusals are the records Kafka refused for good (Refusal), each with
// the settle it asks for: parked while its grace runs, then dead. They
// are settled one by one, before the take, and never make the poller back
// off: the rest of the shard fires on time.
func (p *Poller) refusals(ctx context.Context, b *batch) (poison []redisstore.Poison, refused []refusal) {
	if ctx.Err() != nil {
		return nil, nil
	}
	for i, e := range b.errs {
		if e == nil || b.dead[i] {
			continue
		}
		class := Refusal(e)
		if class == "" {
			continue
		}
		poison = append(poison, p.poisonOf(ctx, b, i, class))
		refused = append(refused, refusal{i: i, class: class})
	}
	return poison, refused
}

// poisonOf is the settle of record i, refused for good for class: parked
// until it is fired again, dead once its grace ended.
func (p *Poller) poisonOf(ctx context.Context, b *batch, i int, class string) redisstore.Poison {
	t, topic, e := b.taken.Tasks[i], b.msgs[i].Topic, b.errs[i]
	first, n, isNew := p.poison.refused(redisstore.Fired{ID: t.ID, Gen: t.Gen}, b.firedAt)
	deadAfter := first.Add(p.cfg.PoisonGrace)
	reason := fmt.Sprintf("kafka refused the record for topic %q for good (%s): %v", topic, class, e)
	if isNew {
		p.log.Warn("kafka refused a record for good; firing it again until its grace ends, then it is dead",
			"task_id", t.ID, "topic", topic, "reason", class, "err", e, "dead_after", deadAfter)
	}
	pz := redisstore.Poison{
		ID: t.ID, Gen: t.Gen, DeadAfter: deadAfter, Reason: reason,
		Park: parkFor(n, deadAfter.Sub(b.firedAt)),
	}
	// Redis' now when SettlePoison runs is about firedAt plus what passed
	// since; a second of margin for the clocks' rates.
	if class == RefusedUnknownTopic && !b.firedAt.Add(time.Since(b.start)+time.Second).Before(deadAfter) &&
		p.topicMayExist(ctx, topic) {
		// created meanwhile, not seen by the writer yet: not dead
		pz.DeadAfter, pz.Park = time.Time{}, parkFor(n, time.Hour)
	}
	return pz
}

// settlePoison stores the settles of the records Kafka refused for good
// and returns the dead-letter records of those made dead, to write after
// the take's settle. A fenced settle ends the batch (the error); any other
// failure leaves them to be released with the others.
func (p *Poller) settlePoison(ctx context.Context, b *batch, poison []redisstore.Poison, refused []refusal) ([]kafka.Message, error) {
	if len(poison) == 0 {
		return nil, nil
	}
	outs, err := p.cfg.Store.SettlePoison(ctx, p.cfg.Shard, p.cfg.Token, b.taken.Lease, poison)
	if errors.Is(err, redisstore.ErrFenced) {
		return nil, fmt.Errorf("settle poison: %w", err)
	}
	if err != nil {
		// released with the others; the poller backs off
		if m := p.cfg.Metrics; m != nil {
			m.StoreErrors.Inc()
		}
		p.log.Warn("could not settle records kafka refused; releasing them", "tasks", len(poison), "err", err)
	}
	var deadMsgs []kafka.Message
	for j, o := range outs {
		i, class := refused[j].i, refused[j].class
		t := b.taken.Tasks[i]
		b.settled[i] = true
		switch o {
		case redisstore.PoisonParked:
			b.tr.poisoned(i, fateParked)
			continue
		case redisstore.PoisonDead:
			p.log.Warn("task is dead: kafka refused its record for good until its grace ended",
				"task_id", t.ID, "topic", b.msgs[i].Topic, "reason", class, "err", b.errs[i])
			if m := p.cfg.Metrics; m != nil {
				m.DeadAtFire.WithLabelValues(class).Inc()
			}
			deadMsgs = append(deadMsgs, record.EncodeDead(t, p.cfg.DeadTopic, b.firedAt, poison[j].Reason))
			b.tr.poisoned(i, fateDead)
			b.tr.deadLetter(i, &deadMsgs[len(deadMsgs)-1])
			p.publishDead(t, poison[j].Reason)
		}
		p.poison.forget(redisstore.Fired{ID: t.ID, Gen: t.Gen})
	}
	return deadMsgs, nil
}

// sorted is what the take's settle stores: the claims Kafka did not
// confirm (released) and a fire receipt per record it acknowledged.
type sorted struct {
	rels      []redisstore.Fired
	acks      []redisstore.Ack
	delivered []int // the tasks whose Ack asks to end delivered, in order
	acked     int   // records Kafka acknowledged (dead letters included)
	retriable int   // records released to fire again
}

// settleTake settles the take (sctx: the settle's own deadline) and, once
// stored, publishes the "delivered" outcome records.
func (p *Poller) settleTake(ctx, sctx context.Context, b *batch) batchResult {
	s := p.sortOut(b)
	m := p.cfg.Metrics
	if m != nil {
		m.Fired.Add(float64(s.acked))
		m.ProduceErrors.Add(float64(len(b.msgs) - s.acked))
	}
	if len(s.rels) > 0 && ctx.Err() == nil {
		p.log.Warn("kafka did not confirm records; releasing them to fire again",
			"failed", len(s.rels), "of", len(b.msgs), "err", firstRetriable(b.errs, b.settled))
	}
	r := batchResult{failed: s.retriable}
	var stored bool
	stored, r.err = p.settle(sctx, b.taken, s.rels, s.acks)
	b.stored = stored
	if stored {
		if m != nil {
			m.Receipts.Add(float64(len(s.acks)))
			m.Delivered.Add(float64(len(s.delivered)))
		}
		if p.cfg.DeliveredOutcomes {
			for _, i := range s.delivered {
				p.publishDelivered(b.taken.Tasks[i], b.msgs[i], b.firedAt)
			}
		}
	}
	return r
}

// sortOut sorts the batch's records by Kafka's answer: acknowledged (a
// receipt, unless a dead letter; delivered when no work process declared
// its topic), settled as poison already, or released.
func (p *Poller) sortOut(b *batch) sorted {
	var s sorted
	m := p.cfg.Metrics
	for i, t := range b.taken.Tasks {
		if b.errs[i] != nil {
			if !b.settled[i] {
				s.retriable++
				s.rels = append(s.rels, redisstore.Fired{ID: t.ID, Gen: t.Gen})
			}
			continue
		}
		s.acked++
		if b.dead[i] {
			if m != nil {
				m.DeadLettered.Inc()
			}
			continue
		}
		a := redisstore.Ack{
			ID: t.ID, Gen: t.Gen, Attempt: max(t.Attempt, 1), DueAt: t.DueAt, FiredAt: b.firedAt,
			Partition: int32(b.msgs[i].Partition), Offset: b.msgs[i].Offset, Token: p.cfg.Token,
			Delivered: p.cfg.Worked != nil && !p.cfg.Worked(b.msgs[i].Topic),
		}
		if a.Delivered {
			s.delivered = append(s.delivered, i)
		}
		s.acks = append(s.acks, a)
		if m != nil {
			m.Lag.Observe(max(b.firedAt.Sub(t.DueAt), 0).Seconds())
		}
	}
	return s
}

// settle releases the claims Kafka did not confirm and makes the rest of
// the take fired (Store.SettleAcks: one script call), retrying a little
// while Redis is unreachable; claims it could not settle come back when
// their lease runs out (a later take re-claims them: Taken.Reclaimed).
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
// listed and redrivable), tried once, after the settle; it returns
// Kafka's answer per record.
func (p *Poller) notifyDead(ctx context.Context, msgs []kafka.Message) []error {
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
	return errs
}

func firstRetriable(errs []error, settled []bool) error {
	for i, e := range errs {
		if e != nil && !settled[i] {
			return e
		}
	}
	return nil
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
