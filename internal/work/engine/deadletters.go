package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/lograte"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/retry"
)

// Dead-letter publishing timings.
const (
	deadBatch        = 256 // dead letters per write
	deadRetryFloor   = 100 * time.Millisecond
	deadRetryCeiling = 10 * time.Second
	deadDrain        = 3 * time.Second // how long shutdown waits for queued dead letters
	deadWarnEvery    = time.Minute     // at most one WARN per period about failed writes
)

// deadLetters writes dead letters to the dead topic in the background.
//
// Redis is the record of truth for dead tasks: report stores the dead state
// (and the dead set entry) first, and the record's offset may be committed
// as soon as that is stored. The dead letter is a notification for the
// consumers of the dead topic; it never holds back a partition's commit or
// the dead listing. So it goes through a bounded queue and is retried with
// backoff for at most Config.DeadLetterMaxAge; it is dropped (and counted in
// delayq_work_dead_letters_dropped_total) when the queue is full, when it
// is older than that, or at shutdown after a drain of at most deadDrain.
// Failed writes are counted by reason (delayq_work_dead_letter_publish_
// errors_total; a missing dead topic is "unknown_topic") and logged at WARN
// at most once a minute.
//
// Records that are not usable delayq tasks (hostile records) take the same
// way: they have no task in Redis, and the log line that reports them
// names their topic, partition and offset.
type deadLetters struct {
	w      MessageWriter
	topic  string
	log    *slog.Logger
	met    *metrics
	maxAge time.Duration
	q      chan deadLetter

	warner lograte.Warner // WARN about failed writes at most once per deadWarnEvery
}

// deadLetter is one queued dead letter.
type deadLetter struct {
	msg   kafka.Message
	since time.Time // when it was queued
}

func newDeadLetters(w MessageWriter, topic string, queue int, maxAge time.Duration, log *slog.Logger, met *metrics) *deadLetters {
	return &deadLetters{w: w, topic: topic, log: log, met: met, maxAge: maxAge, q: make(chan deadLetter, queue),
		warner: lograte.Warner{Log: log, Every: deadWarnEvery}}
}

// enqueue queues msg without blocking. When the queue is full, msg is
// dropped (counted and logged by drop).
func (d *deadLetters) enqueue(msg kafka.Message) {
	select {
	case d.q <- deadLetter{msg: msg, since: time.Now()}:
		d.met.deadQueued.Inc()
	default:
		d.drop("queue_full", 1)
	}
}

func (d *deadLetters) drop(reason string, n int) {
	if n == 0 {
		return
	}
	d.met.deadDropped.WithLabelValues(reason).Add(float64(n))
	d.warner.Warn("dead letters dropped; the dead state is in Redis", "topic", d.topic, "reason", reason, "dropped", n)
}

// run writes queued dead letters until stop is closed, then for at most
// drain more; what is left then is dropped. ctx ends it at once.
func (d *deadLetters) run(ctx context.Context, stop <-chan struct{}, drain time.Duration) {
	wctx, cancel := context.WithCancel(ctx)
	var timer sync.WaitGroup
	defer timer.Wait()
	defer cancel()
	timer.Go(func() {
		select {
		case <-stop:
		case <-wctx.Done():
			return
		}
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-wctx.Done():
		}
	})

	var pending []deadLetter
	stopped := false
	bo := retry.Backoff{Min: deadRetryFloor, Max: deadRetryCeiling, NoJitter: true}
	for {
		if len(pending) == 0 {
			if stopped {
				select {
				case dl := <-d.q:
					pending = append(pending, dl)
				default:
					return
				}
			} else {
				select {
				case dl := <-d.q:
					pending = append(pending, dl)
				case <-stop:
					stopped = true
					continue
				case <-wctx.Done():
				}
			}
		}
		pending = d.fill(pending)
		if wctx.Err() != nil {
			d.giveUp(pending)
			return
		}
		msgs := make([]kafka.Message, len(pending))
		for i := range pending {
			msgs[i] = pending[i].msg
		}
		err := d.w.WriteMessages(wctx, msgs...)
		if wctx.Err() != nil && err != nil {
			d.giveUp(pending)
			return
		}
		pending = d.settle(pending, err)
		if len(pending) == 0 {
			bo.Reset()
			continue
		}
		if !retry.Sleep(wctx, bo.Next()) {
			d.giveUp(pending)
			return
		}
	}
}

// fill adds queued dead letters to pending, up to deadBatch, without
// waiting.
func (d *deadLetters) fill(pending []deadLetter) []deadLetter {
	for len(pending) < deadBatch {
		select {
		case dl := <-d.q:
			pending = append(pending, dl)
		default:
			return pending
		}
	}
	return pending
}

// giveUp drops pending and everything queued (shutdown).
func (d *deadLetters) giveUp(pending []deadLetter) {
	n := len(pending)
	for {
		select {
		case <-d.q:
			n++
			continue
		default:
		}
		break
	}
	if n > 0 {
		d.met.deadQueued.Sub(float64(n))
		d.met.deadDropped.WithLabelValues("shutdown").Add(float64(n))
		d.log.Warn("dead letters not written before shutdown; the dead state is in Redis", "topic", d.topic, "dropped", n)
	}
}

// settle takes the result of writing pending and returns what is to be
// written again: failed dead letters younger than maxAge (one the broker
// refused as too large goes again without its value).
func (d *deadLetters) settle(pending []deadLetter, err error) []deadLetter {
	errs := make([]error, len(pending))
	var we kafka.WriteErrors
	switch {
	case err == nil:
	case errors.As(err, &we) && len(we) == len(pending):
		copy(errs, we)
	default:
		for i := range errs {
			errs[i] = err
		}
	}
	var again []deadLetter
	written, expired := 0, 0
	var reasons = map[string]int{}
	var example error
	for i, dl := range pending {
		e := errs[i]
		if e == nil {
			written++
			continue
		}
		reason := publishErrorReason(e)
		reasons[reason]++
		if example == nil {
			example = e
		}
		if reason == "too_large" && dl.msg.Value != nil {
			dl.msg.Headers = append(dl.msg.Headers, kafka.Header{Key: record.HeaderPayloadBytes, Value: fmt.Appendf(nil, "%d", len(dl.msg.Value))})
			dl.msg.Value = nil
		}
		if time.Since(dl.since) > d.maxAge {
			expired++
			continue
		}
		again = append(again, dl)
	}
	d.met.dead.Add(float64(written))
	d.met.deadQueued.Sub(float64(written + expired))
	for reason, n := range reasons {
		d.met.deadErrors.WithLabelValues(reason).Add(float64(n))
	}
	if example != nil {
		what := "write dead letters failed; retrying in the background (the dead state is in Redis)"
		if reasons["unknown_topic"] > 0 {
			what = "dead topic does not exist; dead letters wait (the dead state is in Redis)"
		}
		d.warner.Warn(what, "topic", d.topic, "err", example, "failed", len(pending)-written, "queued", len(d.q)+len(again))
	}
	if expired > 0 {
		d.met.deadDropped.WithLabelValues("expired").Add(float64(expired))
		d.warner.Warn("dead letters dropped; the dead state is in Redis", "topic", d.topic, "reason", "expired", "dropped", expired, "max_age", d.maxAge)
	}
	return again
}

// publishErrorReason is the reason label of a failed dead-letter write.
func publishErrorReason(err error) string {
	switch {
	case errors.Is(err, kafka.UnknownTopicOrPartition), errors.Is(err, kafka.InvalidTopic):
		return "unknown_topic"
	case tooLarge(err):
		return "too_large"
	default:
		return "other"
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

// deadLetterHostile queues a record that is not a usable delayq record for
// the dead topic with the reason.
func (e *Engine) deadLetterHostile(m *kafka.Message, reason string) {
	e.met.handledInc(typeInvalid, outHostile)
	e.log.Warn("dead-lettering a record that is not a usable delayq task", "reason", reason,
		"topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
	e.deadq.enqueue(record.DeadLetter(m, reason, 0, time.Now(), e.cfg.MaxPayload))
}
