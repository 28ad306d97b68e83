package engine

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// splitPaused separates the items whose type the PauseView says is
// paused: they are parked (to be parked in Redis by park).
func (e *Engine) splitPaused(ready []*item) (run, paused []*item) {
	v := e.cfg.Pause
	if v == nil {
		return ready, nil
	}
	run = ready[:0:0]
	for _, it := range ready {
		if v.Paused(it.t.Type) {
			it.state = stateParked
			paused = append(paused, it)
		} else {
			run = append(run, it)
		}
	}
	return run, paused
}

// park parks claimed items of paused types in Redis: one ParkMany per
// type (so that what each parked is counted by type), retried while Redis
// fails. Every item stays parked and is advanced (it ends committed):
// parked, or found fired again, cancelled or finished meanwhile (nothing
// of ours to park); the park gives the claim up, whatever it answers
// about the task. Items are abandoned when ctx ends first.
func (e *Engine) park(ctx context.Context, items []*item) {
	byType := make(map[string][]*item)
	for _, it := range items {
		byType[it.t.Type] = append(byType[it.t.Type], it)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		e.parkType(ctx, typ, byType[typ])
	}
}

func (e *Engine) parkType(ctx context.Context, typ string, items []*item) {
	ps := make([]redisstore.Park, len(items))
	for i, it := range items {
		ps[i] = redisstore.Park{ID: it.t.ID, Gen: it.t.Gen, Type: typ, Owner: it.cl.value, Shard: it.t.Shard}
	}
	bo := redisBackoff()
	for {
		// a retry after a lost answer is safe: a task parked by the first
		// try has a new generation, so the second finds it stale
		n, err := e.store.ParkMany(ctx, ps)
		e.met.parkedAdd(typ, n) // also what a partly failed call parked
		if ctx.Err() != nil {
			for _, it := range items {
				e.abandon(ctx, it, true)
			}
			return
		}
		if err == nil {
			if n < len(items) {
				e.log.Debug("some tasks of a paused type were not parked: fired again, cancelled or finished meanwhile",
					"type", typ, "parked", n, "records", len(items))
			}
			for _, it := range items {
				it.log.Debug("parked: its type is paused", "type", typ)
				e.met.handledInc(typ, outParked)
				e.advance(ctx, it)
			}
			return
		}
		e.met.redisRetries.WithLabelValues("park").Add(float64(len(items)))
		delay := bo.Next()
		e.log.Warn("redis: parking tasks of a paused type failed; retrying", "type", typ, "err", err,
			"records", len(items), "retry_in", delay)
		retry.Sleep(ctx, delay) // ctx's end is handled above
	}
}

// reconcileLoop unparks, every Config.PauseReconcile until ctx ends, the
// parked tasks of every type the PauseView does not say is paused.
func (e *Engine) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.PauseReconcile)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.reconcile(ctx)
	}
}

// reconcile runs one pass of reconcileLoop. Each work process runs it:
// Unpark is safe to repeat and to race.
func (e *Engine) reconcile(ctx context.Context) {
	v := e.cfg.Pause
	if !v.Synced() {
		return
	}
	parked, err := e.store.ParkedTypes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("pause reconcile: read parked types", "err", err)
		}
		return
	}
	for _, typ := range slices.Sorted(maps.Keys(parked)) {
		if parked[typ] <= 0 || v.Paused(typ) {
			continue
		}
		if !v.Synced() {
			return // asked after Paused: a view that lost its sync meanwhile is not trusted
		}
		n, err := e.store.Unpark(ctx, typ)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.log.Warn("pause reconcile: unpark", "type", typ, "err", err)
			continue
		}
		e.met.reconcileUnparked.Add(float64(n))
		if n > 0 {
			e.log.Info("pause reconcile: unparked tasks of a type that is not paused", "type", typ, "tasks", n)
		}
	}
}
