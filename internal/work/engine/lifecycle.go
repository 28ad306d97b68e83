package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// The lifecycle of one fetched record, the whole of it in this file, top
// to bottom. Each step below takes records in one state and leaves each
// in the next; advance moves a record on from there, and it alone ends
// one (end):
//
//	parsed ──claim──► claimed ──admit──► admitted ──runItem──► running ──decide──► finished ──report──► stored ──► ended
//	  │                 ├──► parked   its type is paused: parked in Redis ─────────────────────────────────────► ended
//	  │                 └──► deferred the Limiter holds it back: due again in Redis, no attempt used ──────────► ended
//	  ├──► held     another run holds its execution: waitClaim, then claimed again
//	  └──► skipped  a stale copy, an outcome stored already, or no usable task (dead-lettered) ──────────────────► ended
//
// At the worker's hard shutdown a record not yet stored, parked or
// deferred turns abandoned instead: it ends uncommitted (its claim given
// up, so that it runs again elsewhere at once). Every ended record gives
// its hold back (Config.MaxHeld, MaxHeldBytes); the skipped, parked,
// deferred and stored ones may be committed (offsets).
type state uint8

const (
	stateParsed    state = iota // its dq-* headers read: to be claimed
	stateClaimed                // its execution is ours and its task read: to be admitted
	stateHeld                   // another run holds its execution: waits, then is claimed again
	stateSkipped                // nothing to run (stale, done, hostile): ends committed
	stateAdmitted               // may run now: queued for a runner
	stateDeferred               // held back by the Limiter: back in Redis, due when it may pass
	stateParked                 // its type is paused: parked in Redis
	stateRunning                // its handler runs
	stateFinished               // its handler returned; its outcome (it.out) is decided: to store
	stateStored                 // the store answered about its outcome: ends committed
	stateAbandoned              // the worker stops first: ends uncommitted
	stateEnded                  // its hold is given back
)

// step names a step of the record path where a fault build crashes the
// process on demand (the chaos suite's DQ_FAULT_CRASH; internal/fault).
type step string

const (
	stepAfterClaim   step = "after-claim"   // the claims' answer is in, not yet acted on
	stepAfterHandle  step = "after-handle"  // a handler returned, its outcome not yet stored
	stepBeforeFinish step = "before-finish" // a pipeline of outcomes is about to be stored
)

// stepHook is called at each step. It is nil, and the steps cost a nil
// check, except in fault builds (stepfault_on.go), the only place that sets
// it: production builds do not link internal/fault.
var stepHook func(step)

func at(s step) {
	if stepHook != nil {
		stepHook(s)
	}
}

// item is one fetched record on its way through its lifecycle.
type item struct {
	state   state
	release bool // abandoned: give its claim up when it ends
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
	// what the Limiter admitted it with, renewed and fenced (see
	// renewLimit; set by dispatch, stopped by lease.stop); nil if nothing
	lease     *limitLease
	unlimited bool           // admitted without the Limiter (a LimitScoper that does not limit its type): no Hold, no Done
	out       pendingOutcome // set once its handler returned (decide)
	// tctx is the context of a record that carries a trace context
	// (trace.go): its attempt span's, or the record's own when tracing is
	// off; nil for the others. span is the attempt span (nil: none), and
	// traceOut the outcome of a skipped record, for it.
	tctx     context.Context
	span     trace.Span
	traceOut string
}

// advance moves a record on from the state its last step left it in:
// to the step that waits for another run's claim, to a runner, to the
// finisher, or to its end. It is the only caller of end.
func (e *Engine) advance(ctx context.Context, it *item) {
	switch it.state {
	case stateHeld:
		e.running.Go(func() { e.waitClaim(ctx, it) })
	case stateAdmitted:
		e.dispatch(ctx, it) // runner.go: a runner calls runItem
	case stateFinished:
		e.report(ctx, it)
	case stateSkipped, stateParked, stateDeferred, stateStored:
		e.end(ctx, it, true)
	case stateAbandoned:
		e.end(ctx, it, false)
	default: // parsed and claimed records go through batch steps; running ones are runItem's
		panic(fmt.Sprintf("engine: advance of a record in state %d", it.state))
	}
}

// end gives a record's hold back; committed records may be committed.
func (e *Engine) end(ctx context.Context, it *item, commit bool) {
	if it.release {
		e.claims.release(context.WithoutCancel(ctx), it.cl)
	}
	if it.span != nil {
		traceEnd(it)
	}
	it.state = stateEnded
	m := it.m
	if commit {
		e.offs.done(m.Topic, m.Partition, m.Offset)
	}
	e.met.running.Dec()
	e.releaseBytes(recordBytes(m))
	<-e.sem
}

// abandon ends a record uncommitted (the worker stops); release: its
// claim is ours and given up now, so that it runs elsewhere at once.
func (e *Engine) abandon(ctx context.Context, it *item, release bool) {
	it.state, it.release = stateAbandoned, release
	e.advance(ctx, it)
}

// processBatch takes one micro-batch through parse, claim and admit, its
// Admit call after those of earlier batches holding records of its keys
// (turn; admitorder.go).
// ctx is the worker's hard shutdown deadline.
func (e *Engine) processBatch(ctx context.Context, msgs []kafka.Message, turn *admitTurn) {
	defer turn.end()
	items := e.parse(ctx, msgs)
	ready, held := e.claim(ctx, items)
	for _, it := range held {
		e.advance(ctx, it)
	}
	e.admit(ctx, ready, turn)
}

// parse reads the dq-* headers of each record: parsed, or skipped (not a
// usable delayq record: dead-lettered).
func (e *Engine) parse(ctx context.Context, msgs []kafka.Message) []*item {
	items := make([]*item, 0, len(msgs))
	all := make([]item, len(msgs)) // one allocation for the batch's items
	for i := range msgs {
		it := &all[i]
		it.m = &msgs[i]
		rec, err := record.Parse(it.m, e.cfg.MaxPayload)
		if err != nil {
			e.skipHostile(ctx, it, err.Error())
			continue
		}
		timeout := rec.Timeout
		if timeout <= 0 {
			timeout = e.cfg.DefaultTimeout
		}
		*it = item{m: it.m, rec: rec, timeout: timeout, cl: e.claims.newClaim(rec.ID, rec.Gen, rec.Shard)}
		it.initLogger(e.log)
		if traced(rec) {
			traceStart(ctx, it)
		}
		items = append(items, it)
	}
	return items
}

// claim claims the execution of every item and reads its task in one
// round trip (Store.ClaimMany, claimed again while Redis fails). It
// returns the claimed items and the held ones; the others are skipped,
// or abandoned when ctx ends, and advanced here.
func (e *Engine) claim(ctx context.Context, items []*item) (ready, held []*item) {
	bo := redisBackoff()
	cs := make([]redisstore.Claim, 0, len(items))
	for len(items) > 0 {
		cs = cs[:0]
		for _, it := range items {
			cs = append(cs, it.cl.of(it.timeout+e.cfg.ClaimMargin, it.rec.DueAt))
		}
		res, _ := e.store.ClaimMany(ctx, cs) // per-record errors in res
		at(stepAfterClaim)
		if ctx.Err() != nil {
			for _, it := range items {
				e.abandon(ctx, it, true) // if an answer was lost
			}
			for _, it := range ready {
				e.abandon(ctx, it, true)
			}
			for _, it := range held {
				e.abandon(ctx, it, false)
			}
			return nil, nil
		}
		var again []*item
		var retryErr error
		now := time.Now() // the claims' time
		for i, r := range res {
			it := items[i]
			switch e.claimAnswered(ctx, it, r); it.state {
			case stateClaimed:
				it.t, it.claimed = r.Task, now
				if it.span != nil {
					traceClaimed(it)
				}
				if ready == nil {
					ready = make([]*item, 0, len(items))
				}
				ready = append(ready, it)
			case stateHeld:
				if it.span != nil {
					it.span.AddEvent("held") // another run holds its execution
				}
				held = append(held, it)
			case stateParsed: // Redis' error: claimed again
				again = append(again, it)
				if retryErr == nil {
					retryErr = r.Err
				}
			}
		}
		if len(again) > 0 {
			e.met.redisRetries.WithLabelValues("claim").Add(float64(len(again)))
			delay := bo.Next()
			e.log.Warn("redis: claim failed; retrying", "err", retryErr, "records", len(again), "retry_in", delay)
			if !retry.Sleep(ctx, delay) {
				items = again
				continue // abandons them above
			}
		}
		items = again
	}
	return ready, held
}

// claimAnswered sets the state the store's answer to an item's claim
// makes of it: claimed, held, parsed (Redis failed: claim it again), or
// skipped (advanced here).
func (e *Engine) claimAnswered(ctx context.Context, it *item, r redisstore.ClaimResult) {
	switch {
	case r.Err != nil && errors.Is(r.Err, task.ErrCorrupt):
		// The only poison: the stored record cannot be decoded.
		e.claims.releaseLater(ctx, it.cl)
		e.skipHostile(ctx, it, "unreadable task record: "+r.Err.Error())
	case r.Err != nil:
		// Any other error is Redis', not the task's (unreachable, OOM,
		// READONLY, LOADING, BUSY, a script error, ...): it says nothing
		// about the record, so the record waits and is claimed again with
		// the same owner (a claim that went through is found again).
		it.state = stateParsed
	case r.Code == redisstore.Claimed:
		it.state = stateClaimed
	case r.Code == redisstore.ClaimHeld:
		it.state = stateHeld
	case r.Code == redisstore.ClaimStale:
		e.skip(ctx, it, outSkippedStale)
	case r.Code == redisstore.ClaimFinished:
		// The outcome of this generation is stored (a retry or redrive
		// waits with the same generation until it is fired again).
		e.skip(ctx, it, outSkippedDone)
	case r.Code == redisstore.ClaimNotFound && !it.rec.FiredAt.IsZero() && time.Since(it.rec.FiredAt) > e.cfg.Retention:
		// An old record replayed (e.g. after an offset reset): the task
		// finished and its record expired.
		e.skip(ctx, it, outSkippedDone)
	default:
		e.skipHostile(ctx, it, "unknown task id \""+task.Truncate(it.rec.ID, 64)+"\"")
	}
}

// skip ends a record with nothing to run, committed.
func (e *Engine) skip(ctx context.Context, it *item, verdict string) {
	it.log.Debug("skipped", "reason", verdict)
	e.met.handledInc(it.rec.Type, verdict)
	it.state, it.traceOut = stateSkipped, verdict
	e.advance(ctx, it)
}

// skipHostile dead-letters a record that is not a usable delayq task
// (deadletters.go) and ends it committed: it never holds its partition
// back, whether or not the dead topic takes it.
func (e *Engine) skipHostile(ctx context.Context, it *item, reason string) {
	e.deadLetterHostile(it.m, reason)
	it.state, it.traceOut = stateSkipped, outHostile
	if it.span != nil {
		it.span.SetStatus(codes.Error, reason)
	}
	e.advance(ctx, it)
}

// waitClaim waits until the run that holds an item's execution finished
// (its outcome is then found) or its claim expired, then goes on with it.
func (e *Engine) waitClaim(ctx context.Context, it *item) {
	e.met.claimWaits.Inc()
	it.log.Info("another run holds this execution; waiting for it to finish or its claim to expire")
	for {
		if !retry.Sleep(ctx, claimPoll) {
			e.abandon(ctx, it, false)
			return
		}
		ready, held := e.claim(ctx, []*item{it})
		if len(held) == 0 {
			e.admit(ctx, ready, nil) // out of its batch's order by now
			return
		}
	}
}

// admit decides what becomes of claimed items: parked when the
// PauseView says their type is paused (park.go), else admitted or
// deferred by the Limiter (limit.go), when one is set. Admitted items go
// to the runners, deferred ones back to Redis (deferItems). turn (nil:
// none) orders the Limiter's call after earlier batches of its keys.
func (e *Engine) admit(ctx context.Context, ready []*item, turn *admitTurn) {
	ready, paused := e.splitPaused(ready)
	if len(paused) > 0 {
		e.park(ctx, paused)
	}
	if len(ready) == 0 {
		return
	}
	run, deferred := e.limit(ctx, ready, turn)
	for _, it := range run {
		e.advance(ctx, it)
	}
	if len(deferred) > 0 {
		e.deferItems(ctx, deferred)
	}
}

// runItem runs the handler of an admitted item on runner r and decides
// its outcome.
func (e *Engine) runItem(ctx context.Context, r *runner, it *item) {
	x := e.execution(ctx, it)
	lease := it.lease // started by dispatch (nil: none)
	defer lease.stop()
	if ctx.Err() != nil {
		// the worker's hard shutdown came while it waited for a handler slot
		lease.stop()
		e.limitDone(ctx, it)
		e.abandon(ctx, it, true)
		return
	}
	started := time.Now()
	if started.Sub(it.claimed) > (it.timeout+e.cfg.ClaimMargin)/2 {
		if !e.reclaim(ctx, it) {
			return
		}
		started = time.Now()
	}
	it.state = stateRunning
	if it.span != nil {
		traceRunning(it, started, x.DueAt)
	}
	ran, herr := e.execute(ctx, r.ht, it.log, x, started, it.lease, it.tctx)
	at(stepAfterHandle)
	if it.span != nil {
		traceHandled(it, ran, herr)
	}
	lease.stop()
	if ctx.Err() != nil {
		e.limitDone(ctx, it)
		it.log.Warn("abandoned at shutdown; the record stays uncommitted", "err", herr)
		e.abandon(ctx, it, true) // runs again elsewhere: at once
		return
	}
	// a stored outcome gives the claim up in the same script call; the
	// item ends once it is stored, while this runner goes on
	e.decide(it, x, herr, runInfo{shard: it.t.Shard, started: started, dur: ran})
	e.limitHold(ctx, it) // a retry keeps its key's order before its slot is freed
	e.limitDone(ctx, it)
	e.advance(ctx, it)
}

// execution is the handler's view of an item's run. A task whose own
// timeout is longer than its claim's has the claim extended first.
func (e *Engine) execution(ctx context.Context, it *item) *Execution {
	t := it.t
	timeout := it.timeout
	if t.Timeout > 0 && t.Timeout != timeout {
		if t.Timeout > timeout {
			if err := e.claims.extend(ctx, it.cl, t.Timeout+e.cfg.ClaimMargin); err != nil {
				it.log.Warn("extend claim", "err", err)
			}
			it.timeout = t.Timeout // a claim taken again lasts as long
		}
		timeout = t.Timeout
	}
	x := &Execution{
		ID: t.ID, Type: t.Type, Payload: t.Payload, ContentType: it.rec.ContentType,
		Attempt: t.Attempt, MaxAttempts: t.Attempts(), Gen: t.Gen,
		DueAt: t.DueAt, FiredAt: it.rec.FiredAt, Headers: t.Headers, Priority: t.Priority, Timeout: timeout,
	}
	if x.ContentType == "" {
		x.ContentType = t.ContentType()
	}
	if x.FiredAt.IsZero() {
		x.FiredAt = it.m.Time
	}
	return x
}

// reclaim claims an item's execution again before it runs, after it waited
// for a handler slot for more than half its claim's TTL: the claim may
// have expired meanwhile, and a run elsewhere (a rebalance handed the
// record over) may hold it or have finished the task. The same owner finds
// its own claim and renews it. It reports whether the item may run; if
// not, the item was skipped or abandoned, or waits for the other run.
func (e *Engine) reclaim(ctx context.Context, it *item) bool {
	e.met.reclaims.Inc()
	ready, held := e.claim(ctx, []*item{it})
	if len(ready) == 1 {
		return true
	}
	it.lease.stop()
	e.limitDone(ctx, it)
	for _, h := range held {
		e.advance(ctx, h)
	}
	return false
}

// pendingOutcome is the outcome of an item's run on its way to Redis:
// set by decide once the handler returned, stored by the finisher.
type pendingOutcome struct {
	x     *Execution // the execution as its handler saw it
	herr  error      // the handler's error
	f     redisstore.Finish
	label string // of delayq_work_handled_total
	why   string // why a dead task died
	run   runInfo
}

// runInfo is what report needs to know about a run besides its outcome.
type runInfo struct {
	shard   int
	started time.Time
	dur     time.Duration // how long the handler ran
}

// decide sets it.out to the outcome of its run of x: succeeded, retry
// with backoff, or dead. The item is finished.
func (e *Engine) decide(it *item, x *Execution, herr error, run runInfo) {
	o := &it.out
	*o = pendingOutcome{x: x, herr: herr, run: run,
		f: redisstore.Finish{ID: x.ID, Gen: x.Gen, Owner: it.cl.value, Shard: it.cl.shard, ShardSet: it.cl.shard >= 0,
			Attempt: x.Attempt, Started: run.started}} // the attempt history's entry
	switch {
	case herr == nil:
		o.f.Kind, o.label = redisstore.Succeeded, outSucceeded
	case IsPermanent(herr) || x.LastAttempt():
		o.f.Kind, o.label, o.f.Error = redisstore.Dead, outDead, herr.Error()
		o.why = "permanent failure"
		if !IsPermanent(herr) {
			o.why = fmt.Sprintf("attempt %d of %d failed", x.Attempt, x.MaxAttempts)
		}
	default:
		d, ok := RetryDelay(herr)
		if !ok {
			d = e.cfg.Backoff(x.Attempt)
		}
		o.f.Kind, o.label, o.f.Error = redisstore.Retry, outRetry, herr.Error()
		o.f.Relative, o.f.Delay = true, d
		it.log.Debug("task failed; retrying", "type", x.Type, "attempt", x.Attempt, "delay", d, "err", herr)
	}
	it.state = stateFinished
}

// report stores the outcome of a finished item (it.out, see decide)
// without waiting for it: the finisher stores the outcome in its next
// pipeline and hands the answer to outcomeAnswered on its own goroutine,
// while the runner goes on with its next item (waiting for the answer
// parked the runner and woke it again for every task). The item counts
// in e.running until it ended.
//
// A dead task's state is stored in Redis first (the record of truth: the
// dead listing shows it at once, and the record may be committed); its
// dead letter is then queued for the dead topic (see deadLetters), which
// never holds the record back.
func (e *Engine) report(ctx context.Context, it *item) {
	e.running.Add(1) // the caller's item counts: the count is above 0
	if !e.finisher.queue(ctx, it) {
		e.outcomeAnswered(ctx, it, ctx.Err())
	}
}

// outcomeAnswered takes the store's answer about an item's outcome
// (err: nil when it was stored), on the finisher's goroutine: the item
// is stored. An error of Redis, or ctx's end, goes on in a goroutine of
// its own (storeOutcome), which stores the outcome again with backoff,
// so that the finisher never waits for Redis on an item's behalf.
func (e *Engine) outcomeAnswered(ctx context.Context, it *item, err error) {
	if err != nil && (!storeAnswered(err) || ctx.Err() != nil) {
		go func() {
			defer e.running.Done()
			e.storeOutcome(ctx, it, err)
		}()
		return
	}
	e.stored(ctx, it, err)
	it.state = stateStored // the finish gave the claim up
	e.advance(ctx, it)
	e.running.Done()
}

// storeOutcome stores it.out again after the first try failed with
// firstErr, retrying while Redis is unreachable: the item is stored, or
// abandoned when ctx ended before its outcome was stored.
func (e *Engine) storeOutcome(ctx context.Context, it *item, firstErr error) {
	var reply chan redisstore.FinishResult
	err := retryRedis(ctx, it.log, "store outcome", func() error {
		err := firstErr
		if firstErr != nil {
			firstErr = nil
		} else {
			_, err = e.finisher.finish(ctx, it.out.f, &reply)
			if ownOutcome(it.out.f.Kind, err) {
				// an earlier try whose outcome was unknown (a timeout, the
				// replicas' confirmation missing) had stored it
				err = nil
			}
		}
		if err == nil || storeAnswered(err) || ctx.Err() != nil {
			return err
		}
		e.met.redisRetries.WithLabelValues("finish").Inc()
		return &retryable{err} // any Redis error: the outcome is stored again
	})
	if !e.stored(ctx, it, err) {
		e.abandon(ctx, it, true)
		return
	}
	it.state = stateStored
	e.advance(ctx, it)
}

// stored completes the report of it.out once the store answered (err:
// nil when the outcome was stored): the dead letter, OnOutcome, metrics.
// It returns false only when ctx ended before the outcome was stored.
func (e *Engine) stored(ctx context.Context, it *item, err error) bool {
	o, log := &it.out, it.log
	switch {
	case err == nil && o.f.Kind == redisstore.Dead:
		log.Warn("task dead", "type", o.x.Type, "attempt", o.x.Attempt, "why", o.why, "err", o.herr)
		e.deadq.enqueue(record.DeadLetter(it.m, o.herr.Error(), o.x.Attempt, time.Now(), e.cfg.MaxPayload))
		e.notify(log, o.f, o.x, o.herr, o.run)
	case err == nil:
		e.notify(log, o.f, o.x, o.herr, o.run)
	case ctx.Err() != nil:
		log.Warn("outcome not stored before shutdown; the record stays uncommitted", "outcome", o.label)
		return false
	default:
		// Fired again, cancelled, or finished by someone else meanwhile:
		// nothing of ours to store.
		log.Warn("outcome not stored", "outcome", o.label, "err", err)
		it.traceOut = outNotStored
	}
	if it.span != nil && err == nil {
		it.span.AddEvent("finished") // its outcome is stored
	}
	if o.label == outRetry {
		e.met.retries.Inc()
	}
	e.met.handledInc(o.x.Type, o.label)
	return true
}
