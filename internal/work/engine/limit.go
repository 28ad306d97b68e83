package engine

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// limitRetry is how long a batch waits when the Limiter failed, or a
// deferred item without a NotBefore.
const limitRetry = time.Second

func (it *item) limitItem() LimitItem {
	return LimitItem{ID: it.t.ID, Type: it.t.Type, Priority: it.t.Priority, Key: it.t.Key, Headers: it.t.Headers, Due: it.t.DueAt}
}

// limit asks the Limiter (when set) which claimed items may run now and
// sets each admitted or deferred, with its decision. A failing Limiter
// defers every item it was asked about a little (fail closed), without
// using an attempt; the items of types a LimitScoper does not limit are
// not asked about, and run. The Limiter is asked after the earlier
// batches holding records of the same keys asked it (turn, admitorder.go).
func (e *Engine) limit(ctx context.Context, ready []*item, turn *admitTurn) (run, deferred []*item) {
	l := e.cfg.Limiter
	if l == nil {
		for _, it := range ready {
			it.state = stateAdmitted
		}
		return ready, nil
	}
	// the items of types the Limiter does not limit (no rule: most types)
	// are admitted here, without a round trip or a copy of them through
	// the layers down to the limiter
	limited := ready
	if s, ok := l.(LimitScoper); ok {
		limited = nil
		var last string
		var lastLimits bool
		for i, it := range ready {
			if i == 0 || it.t.Type != last {
				last, lastLimits = it.t.Type, s.Limits(it.t.Type)
			}
			it.unlimited = !lastLimits
			if lastLimits {
				limited = append(limited, it)
			}
		}
	}
	var decs []LimitDecision
	if len(limited) > 0 {
		lis := make([]LimitItem, len(limited))
		for i, it := range limited {
			lis[i] = it.limitItem()
		}
		var err error
		turn.wait(ctx)
		decs, err = l.Admit(ctx, lis)
		turn.end()
		if err == nil && len(decs) != len(limited) {
			err = errors.New("limiter returned a wrong number of decisions")
		}
		if err != nil {
			e.log.Warn("rate limiter failed; deferring the batch", "err", err, "records", len(limited), "retry_in", limitRetry)
			decs = make([]LimitDecision, len(limited))
			for i := range decs {
				decs[i].Reason = "limiter_error"
			}
		}
	}
	run = ready[:0:0]
	for _, it := range ready {
		if it.unlimited {
			it.dec = LimitDecision{Run: true}
		} else {
			it.dec, decs = decs[0], decs[1:]
		}
		if it.dec.Run {
			it.state = stateAdmitted
			run = append(run, it)
		} else {
			it.state = stateDeferred
			deferred = append(deferred, it)
		}
	}
	return run, deferred
}

// limitHold keeps a task that goes to retry in its key's order (a
// LimitHolder: a rule with a key or header scope), before its slot is
// given back: a later task of the key must not start in between. A failed
// hold is logged; the retry is stored all the same.
func (e *Engine) limitHold(ctx context.Context, it *item) {
	h, ok := e.cfg.Limiter.(LimitHolder)
	if !ok || it.unlimited || it.out.f.Kind != redisstore.Retry {
		return
	}
	until := time.Now().Add(it.out.f.Delay)
	if err := h.Hold(context.WithoutCancel(ctx), it.limitItem(), until); err != nil {
		it.log.Warn("rate limit: could not keep the retried task in its key's order", "err", err)
	}
}

// limitDone tells the Limiter (when set) that an admitted item's handler
// returned, or will not run.
func (e *Engine) limitDone(ctx context.Context, it *item) {
	if l := e.cfg.Limiter; l != nil && !it.unlimited {
		l.Done(context.WithoutCancel(ctx), it.limitItem(), it.dec)
	}
}

// deferItems puts items held back by the Limiter back into Redis, due when
// they may pass: not a failure, not an attempt. Their claims are given up.
// Each stays deferred and is advanced once the store answered about it
// (it ends committed), or abandoned when ctx ends first.
func (e *Engine) deferItems(ctx context.Context, items []*item) {
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
		res, _ := e.store.FinishMany(ctx, fs) // per-record errors in res
		if ctx.Err() != nil {
			for _, it := range items {
				e.abandon(ctx, it, true)
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
			e.met.handledInc(it.t.Type, outDeferred)
			e.advance(ctx, it) // the finish gave the claim up
		}
		if len(again) > 0 {
			e.met.redisRetries.WithLabelValues("defer").Add(float64(len(again)))
			delay := bo.Next()
			e.log.Warn("redis: storing deferrals failed; retrying", "err", againErr, "records", len(again), "retry_in", delay)
			if !retry.Sleep(ctx, delay) {
				items, fs = again, againF
				continue // abandons them above
			}
		}
		items, fs = again, againF
	}
}
