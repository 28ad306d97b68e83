package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// Micro-batches: the fetch loop hands over whatever records FetchMessage
// returned within batchWindow of the first one (at most maxBatch, and no
// more than Config.MaxHeld records held at once). A batch costs one Redis
// round trip to claim every record's execution and read its task
// (redisstore.ClaimMany), one to the Limiter when one is set, then its
// handlers run in the pool and their outcomes are stored by the finisher,
// which coalesces concurrent outcomes into one pipeline.
const (
	maxBatch    = 256
	batchWindow = time.Millisecond
)

// DefaultHeldBatches is how many micro-batches (of up to 256 records) a
// worker holds besides its Concurrency by default (Config.MaxHeld). Two
// were what bounded one work process on a 16-core machine whose Redis had
// cores to spare (8 masters): 22% of the raw kafka-go rate with 2, 29–38%
// with 8 (docs/benchmarks.md, session 21).
const DefaultHeldBatches = 8

// DefaultMaxHeldBytes is Config.MaxHeldBytes' default: with records of a
// few hundred bytes the count binds first; with large payloads (up to
// MaxPayload, 1 MiB by default) this does, long before MaxHeld records.
const DefaultMaxHeldBytes = 64 << 20

// recordBytes is what a held record counts against Config.MaxHeldBytes.
func recordBytes(m *kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// item is one fetched record on its way through a micro-batch.
type item struct {
	m       *kafka.Message
	rec     *record.Fields
	log     *slog.Logger // &logv
	logv    slog.Logger
	logh    recordHandler
	timeout time.Duration // the claim's timeout (header or default)
	cl      claim
	claimed time.Time     // when the claim was (last) taken
	t       *task.Task    // set once claimed
	dec     LimitDecision // set once admitted
	// stopRenew stops the renewals of what the Limiter admitted it with
	// (see renewLimit); set by dispatch
	stopRenew func()
	lease     *limitLease    // what the Limiter admitted it with, renewed and fenced (see renewLimit); nil if nothing
	out       pendingOutcome // set once its handler returned
}

// initLogger sets it.log: l with the attributes of its record, without
// an allocation (see recordHandler).
func (it *item) initLogger(l *slog.Logger) {
	m := it.m
	it.logh = recordHandler{base: l.Handler(), id: it.rec.ID, gen: it.rec.Gen, topic: m.Topic, partition: m.Partition, offset: m.Offset}
	it.logv = *slog.New(&it.logh)
	it.log = &it.logv
}

func (it *item) limitItem() LimitItem {
	return LimitItem{ID: it.t.ID, Type: it.t.Type, Priority: it.t.Priority}
}

// end releases a record's hold; finished records may be committed.
func (w *Worker) end(m *kafka.Message, finished bool) {
	if finished {
		w.offs.done(m.Topic, m.Partition, m.Offset)
	}
	w.met.running.Dec()
	w.releaseBytes(recordBytes(m))
	<-w.sem
}

// holdBytes counts n bytes of a fetched record as held.
func (w *Worker) holdBytes(n int64) {
	w.met.heldBytes.Add(float64(n))
	w.heldBytes.Add(n)
}

// releaseBytes gives n held bytes back and wakes a fetch loop waiting for
// the held bytes to fall below the bound.
func (w *Worker) releaseBytes(n int64) {
	w.met.heldBytes.Sub(float64(n))
	if w.heldBytes.Add(-n) < w.cfg.MaxHeldBytes {
		select {
		case w.bytesFreed <- struct{}{}:
		default:
		}
	}
}

// bytesFull reports whether the held bytes reached Config.MaxHeldBytes.
func (w *Worker) bytesFull() bool { return w.heldBytes.Load() >= w.cfg.MaxHeldBytes }

// processBatch claims, admits and dispatches one micro-batch. Every record
// ends exactly once with w.end. ctx is the worker's hard shutdown deadline.
func (w *Worker) processBatch(ctx context.Context, msgs []kafka.Message) {
	items := make([]*item, 0, len(msgs))
	all := make([]item, len(msgs)) // one allocation for the batch's items
	for i := range msgs {
		m := &msgs[i]
		rec, err := record.Parse(m, w.cfg.MaxPayload)
		if err != nil {
			w.hostileLater(m, err.Error())
			continue
		}
		timeout := rec.Timeout
		if timeout <= 0 {
			timeout = w.cfg.DefaultTimeout
		}
		it := &all[i]
		*it = item{m: m, rec: rec, timeout: timeout, cl: w.claims.newClaim(rec.ID, rec.Gen, rec.Shard)}
		it.initLogger(w.log)
		items = append(items, it)
	}
	ready, held := w.claimItems(ctx, items)
	for _, it := range held {
		w.running.Go(func() { w.waitClaim(ctx, it) })
	}
	w.admitAndRun(ctx, ready)
}

// hostileLater dead-letters a record that is not a usable delayq task and
// ends it as finished.
func (w *Worker) hostileLater(m *kafka.Message, reason string) {
	w.deadLetterHostile(m, reason)
	w.end(m, true)
}

// claimItems claims the execution of every item and reads its task in one
// round trip (retried while Redis is unreachable). It returns the items
// claimed and the items whose execution another run holds; every other
// item (stale, finished, hostile, or ctx ended) is ended here.
func (w *Worker) claimItems(ctx context.Context, items []*item) (ready, held []*item) {
	bo := redisBackoff()
	cs := make([]redisstore.Claim, 0, len(items))
	for len(items) > 0 {
		cs = cs[:0]
		for _, it := range items {
			cs = append(cs, redisstore.Claim{ID: it.rec.ID, Gen: it.rec.Gen, TTL: it.timeout + w.cfg.ClaimMargin, Owner: it.cl.value, Due: it.rec.DueAt,
				Shard: it.cl.shard, ShardSet: it.cl.shard >= 0})
		}
		res, _ := w.store.ClaimMany(ctx, cs) // per-record errors in res
		faultPoint("after-claim")
		if ctx.Err() != nil {
			for _, it := range items {
				w.claims.release(context.WithoutCancel(ctx), it.cl) // if an answer was lost
				w.end(it.m, false)
			}
			for _, it := range ready {
				w.claims.release(context.WithoutCancel(ctx), it.cl)
				w.end(it.m, false)
			}
			for _, it := range held {
				w.end(it.m, false)
			}
			return nil, nil
		}
		var again []*item
		var retryErr error
		now := time.Now() // the claims' time
		for i, r := range res {
			it := items[i]
			switch {
			case r.Err != nil && errors.Is(r.Err, task.ErrCorrupt):
				// The only poison: the stored record cannot be decoded.
				w.claims.releaseLater(ctx, it.cl)
				w.hostileLater(it.m, "unreadable task record: "+r.Err.Error())
			case r.Err != nil:
				// Any other error is Redis', not the task's (unreachable,
				// OOM, READONLY, LOADING, BUSY, a script error, ...): it
				// says nothing about the record, so the record waits and
				// is claimed again with the same owner (a claim that went
				// through is found again).
				again = append(again, it)
				if retryErr == nil {
					retryErr = r.Err
				}
			case r.Code == redisstore.Claimed:
				it.t, it.claimed = r.Task, now
				if ready == nil {
					ready = make([]*item, 0, len(items))
				}
				ready = append(ready, it)
			case r.Code == redisstore.ClaimHeld:
				held = append(held, it)
			case r.Code == redisstore.ClaimStale:
				w.skip(it, outSkippedStale)
			case r.Code == redisstore.ClaimFinished:
				// The outcome of this generation is stored (a retry or
				// redrive waits with the same generation until it is
				// fired again).
				w.skip(it, outSkippedDone)
			case r.Code == redisstore.ClaimNotFound && !it.rec.FiredAt.IsZero() && time.Since(it.rec.FiredAt) > w.cfg.Retention:
				// An old record replayed (e.g. after an offset reset): the
				// task finished and its record expired.
				w.skip(it, outSkippedDone)
			default:
				w.hostileLater(it.m, "unknown task id \""+task.Truncate(it.rec.ID, 64)+"\"")
			}
		}
		if len(again) > 0 {
			w.met.redisRetries.WithLabelValues("claim").Add(float64(len(again)))
			delay := bo.Next()
			w.log.Warn("redis: claim failed; retrying", "err", retryErr, "records", len(again), "retry_in", delay)
			if !retry.Sleep(ctx, delay) {
				items = again
				continue // ends them above
			}
		}
		items = again
	}
	return ready, held
}

func (w *Worker) skip(it *item, verdict string) {
	it.log.Debug("skipped", "reason", verdict)
	w.met.handledInc(it.rec.Type, verdict)
	w.end(it.m, true)
}

// waitClaim waits until the run that holds an item's execution finished
// (its outcome is then found) or its claim expired, then goes on with it.
func (w *Worker) waitClaim(ctx context.Context, it *item) {
	w.met.claimWaits.Inc()
	it.log.Info("another run holds this execution; waiting for it to finish or its claim to expire")
	for {
		if !retry.Sleep(ctx, claimPoll) {
			w.end(it.m, false)
			return
		}
		ready, held := w.claimItems(ctx, []*item{it})
		if len(held) == 0 {
			w.admitAndRun(ctx, ready)
			return
		}
	}
}

// admitAndRun parks the claimed items of paused types (Config.Pause), asks
// the Limiter (when set) which of the others may run now, defers the ones
// it holds back and starts a handler for each admitted one.
func (w *Worker) admitAndRun(ctx context.Context, ready []*item) {
	ready, paused := w.splitPaused(ready)
	if len(paused) > 0 {
		w.parkItems(ctx, paused)
	}
	if len(ready) == 0 {
		return
	}
	var deferred []*item
	if l := w.cfg.Limiter; l != nil {
		lis := make([]LimitItem, len(ready))
		for i, it := range ready {
			lis[i] = it.limitItem()
		}
		decs, err := l.Admit(ctx, lis)
		if err == nil && len(decs) != len(ready) {
			err = errors.New("limiter returned a wrong number of decisions")
		}
		if err != nil {
			// Fail closed: the whole batch waits a little, without using
			// an attempt.
			w.log.Warn("rate limiter failed; deferring the batch", "err", err, "records", len(ready), "retry_in", limitRetry)
			decs = make([]LimitDecision, len(ready))
			for i := range decs {
				decs[i].Reason = "limiter_error"
			}
		}
		run := ready[:0:0]
		for i, it := range ready {
			it.dec = decs[i]
			if it.dec.Run {
				run = append(run, it)
			} else {
				deferred = append(deferred, it)
			}
		}
		ready = run
	}
	for _, it := range ready {
		w.dispatch(ctx, it)
	}
	if len(deferred) > 0 {
		w.deferItems(ctx, deferred)
	}
}

// deferItems puts items held back by the Limiter back into Redis, due when
// they may pass: not a failure, not an attempt. Their claims are released.
func (w *Worker) deferItems(ctx context.Context, items []*item) {
	fs := make([]redisstore.Finish, len(items))
	for i, it := range items {
		f := redisstore.Finish{ID: it.t.ID, Gen: it.t.Gen, Kind: redisstore.Defer, Due: it.dec.NotBefore, Owner: it.cl.value,
			Shard: it.t.Shard, ShardSet: true}
		if f.Due.IsZero() {
			f.Relative, f.Delay = true, limitRetry
		}
		fs[i] = f
	}
	bo := redisBackoff()
	for len(items) > 0 {
		res, _ := w.store.FinishMany(ctx, fs) // per-record errors in res
		if ctx.Err() != nil {
			for _, it := range items {
				w.claims.release(context.WithoutCancel(ctx), it.cl)
				w.end(it.m, false)
			}
			return
		}
		var again []*item
		var againF []redisstore.Finish
		var againErr error
		for i, r := range res {
			it := items[i]
			if r.Err != nil && !storeAnswered(r.Err) {
				// Redis' error, not an answer about the task: store it again
				again, againF = append(again, it), append(againF, fs[i])
				againErr = cmp.Or(againErr, r.Err)
				continue
			}
			if r.Err != nil {
				// fired again, cancelled or finished meanwhile: nothing of ours to store
				it.log.Warn("deferral not stored", "err", r.Err)
			} else {
				it.log.Debug("deferred by rate limit", "type", it.t.Type, "reason", it.dec.Reason, "due", r.State)
			}
			w.met.handledInc(it.t.Type, outDeferred)
			w.end(it.m, true) // the finish gave the claim up
		}
		if len(again) > 0 {
			w.met.redisRetries.WithLabelValues("defer").Add(float64(len(again)))
			delay := bo.Next()
			w.log.Warn("redis: storing deferrals failed; retrying", "err", againErr, "records", len(again), "retry_in", delay)
			if !retry.Sleep(ctx, delay) {
				items, fs = again, againF
				continue // ends them above
			}
		}
		items, fs = again, againF
	}
}

// reclaim claims an item's execution again before it runs, after it waited
// for a handler slot for more than half its claim's TTL: the claim may
// have expired meanwhile, and a run elsewhere (a rebalance handed the
// record over) may hold it or have finished the task. The same owner finds
// its own claim and renews it. It reports whether the item may run; if
// not, the item is ended or waits for the other run (see claimItems).
func (w *Worker) reclaim(ctx context.Context, it *item, stopRenew func()) bool {
	w.met.reclaims.Inc()
	ready, held := w.claimItems(ctx, []*item{it})
	if len(ready) == 1 {
		return true
	}
	stopRenew()
	if l := w.cfg.Limiter; l != nil {
		l.Done(context.WithoutCancel(ctx), it.limitItem(), it.dec)
	}
	for _, h := range held {
		w.running.Go(func() { w.waitClaim(ctx, h) })
	}
	return false
}

// runItem runs the handler of a claimed, admitted item and stores its
// outcome, on runner r.
func (w *Worker) runItem(ctx context.Context, r *runner, it *item) {
	t, log := it.t, it.log
	timeout := it.timeout
	if t.Timeout > 0 && t.Timeout != timeout {
		if t.Timeout > timeout {
			if err := w.claims.extend(ctx, it.cl, t.Timeout+w.cfg.ClaimMargin); err != nil {
				log.Warn("extend claim", "err", err)
			}
			it.timeout = t.Timeout // a claim taken again lasts as long
		}
		timeout = t.Timeout
	}
	job := &Task{
		ID: t.ID, Type: t.Type, Payload: t.Payload, ContentType: it.rec.ContentType,
		Attempt: t.Attempt, MaxAttempts: t.Attempts(), Gen: t.Gen,
		DueAt: t.DueAt, FiredAt: it.rec.FiredAt, Headers: t.Headers, Priority: t.Priority, Timeout: timeout,
	}
	if job.ContentType == "" {
		job.ContentType = t.ContentType()
	}
	if job.FiredAt.IsZero() {
		job.FiredAt = it.m.Time
	}
	stopRenew := it.stopRenew // started by dispatch
	defer stopRenew()
	if ctx.Err() != nil {
		// the worker's hard shutdown came while it waited for a handler slot
		stopRenew()
		w.claims.release(context.WithoutCancel(ctx), it.cl)
		if l := w.cfg.Limiter; l != nil {
			l.Done(context.WithoutCancel(ctx), it.limitItem(), it.dec)
		}
		w.end(it.m, false)
		return
	}
	started := time.Now()
	if started.Sub(it.claimed) > (it.timeout+w.cfg.ClaimMargin)/2 {
		if !w.reclaim(ctx, it, stopRenew) {
			return
		}
		started = time.Now()
	}
	ran, herr := w.execute(ctx, r.ht, log, job, started, it.lease)
	faultPoint("after-handle")
	stopRenew()
	if l := w.cfg.Limiter; l != nil {
		l.Done(context.WithoutCancel(ctx), it.limitItem(), it.dec)
	}
	if ctx.Err() != nil {
		w.claims.release(context.WithoutCancel(ctx), it.cl) // runs again elsewhere: at once
		log.Warn("abandoned at shutdown; the record stays uncommitted", "err", herr)
		w.end(it.m, false)
		return
	}
	// a stored outcome gives the claim up in the same script call; the
	// item ends once it is stored, while this runner goes on
	w.decide(it, job, herr, runInfo{shard: t.Shard, started: started, dur: ran})
	w.report(ctx, it)
}
