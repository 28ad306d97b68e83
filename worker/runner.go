package worker

import "context"

// Runners: admitted items run on long-lived goroutines, one item at a
// time each. A goroutine started per record cost, per task, its creation
// and exit and the growth of its stack from the initial 2 KiB (copied at
// each doubling): about 2 us of the worker's CPU per task in
// BenchmarkThroughput, more than any other part of the worker's own path.
//
// A runner is a handler slot: there are at most Config.Concurrency of
// them. dispatch queues an admitted item (w.queue, never full: the
// records held bound it); a runner takes the queued items one after the
// other, and waits for the next when none is queued. A runner is started
// when an item is queued or taken while more wait, none is idle and
// fewer than Concurrency run, so a handler slot is never left unused
// while an item waits. Sending to the queue wakes an idle runner when
// there is one, so that a micro-batch wakes at most as many runners as
// are idle; an item handed to a runner of its own woke one per task, and
// the items that waited for a handler slot were each parked and woken
// again. Runners exit when the worker stops (stopRunners).

// runner is what a runner keeps from one item to the next: nothing of a
// task.
type runner struct {
	ht *handlerTimer // ends its handlers' contexts
}

// dispatch queues it for a runner. Each item counts in w.running until
// runItem returned, then until its outcome is stored (see report). ctx
// is the worker's hard shutdown context (workCtx), the same for every
// item.
func (w *Worker) dispatch(ctx context.Context, it *item) {
	w.running.Add(1) // the caller holds records: the count is above 0
	// what the Limiter admitted it with (a concurrency slot) is renewed
	// while it waits for a handler slot and runs, and given back after
	it.stopRenew = w.renewLimit(ctx, it)
	w.queue <- it
	w.spawnRunner(ctx)
}

// spawnRunner starts a runner if items wait, no runner is idle and fewer
// than Concurrency run.
func (w *Worker) spawnRunner(ctx context.Context) {
	for len(w.queue) > 0 && w.idleRunners.Load() == 0 {
		n := w.nRunners.Load()
		if n >= int64(w.cfg.Concurrency) {
			return
		}
		if w.nRunners.CompareAndSwap(n, n+1) {
			w.runners.Go(func() { w.runnerLoop(ctx) })
			return
		}
	}
}

// runnerLoop runs queued items until stopRunners is closed.
func (w *Worker) runnerLoop(ctx context.Context) {
	r := &runner{ht: newHandlerTimer(ctx)}
	defer r.ht.stop()
	for {
		var it *item
		select {
		case it = <-w.queue:
		default:
			w.idleRunners.Add(1)
			select {
			case it = <-w.queue:
				w.idleRunners.Add(-1)
			case <-w.stopRunners:
				return
			}
		}
		w.spawnRunner(ctx) // more items may wait
		w.runItem(ctx, r, it)
		w.running.Done()
	}
}
