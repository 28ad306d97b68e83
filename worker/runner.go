package worker

import (
	"context"
)

// Runners: admitted items run on long-lived goroutines, one item at a
// time each. A goroutine started per record cost, per task, its creation
// and exit and the growth of its stack from the initial 2 KiB (copied at
// each doubling), and each of them parked while it waited for a handler
// slot: about 3 us of the worker's CPU per task in BenchmarkThroughput.
//
// dispatch queues an admitted item (w.queue: never full, the records held
// bound it); runners take items from the queue. A runner is busy from
// taking an item until its handler returned (or the item ended before);
// then it stores the outcome, not busy, and takes the next item. A new
// runner is started when items wait, no runner is idle and fewer than
// Config.Concurrency runners are busy, so that at most Concurrency
// runners compete for the Concurrency handler slots, as many runners as
// wait for their outcomes are added, and a handler slot is never left
// unused while an item waits. Runners exit when the worker stops
// (stopRunners).

// dispatch queues it for a runner. Each item counts in w.running until
// runItem returned. ctx is the worker's hard shutdown context (workCtx),
// the same for every item.
func (w *Worker) dispatch(ctx context.Context, it *item) {
	w.running.Add(1) // the caller holds records: the count is above 0
	// what the Limiter admitted it with (a concurrency slot) is renewed
	// while it waits for a runner and a handler slot and runs, and given
	// back after
	it.stopRenew = w.renewLimit(ctx, it)
	w.queue <- it
	w.spawnRunner(ctx)
}

// spawnRunner starts a runner if items wait, no runner is idle and fewer
// than Concurrency runners are busy.
func (w *Worker) spawnRunner(ctx context.Context) {
	for len(w.queue) > 0 && w.idleRunners.Load() == 0 {
		b := w.busyRunners.Load()
		if int(b) >= w.cfg.Concurrency {
			return
		}
		if w.busyRunners.CompareAndSwap(b, b+1) { // busy from its start
			w.runners.Go(func() { w.runnerLoop(ctx) })
			return
		}
	}
}

// unbusy marks the calling runner not busy (its handler returned, or its
// item ended before): another runner may be needed for the items waiting.
func (w *Worker) unbusy(ctx context.Context) {
	w.busyRunners.Add(-1)
	w.spawnRunner(ctx)
}

// runnerLoop takes items from the queue and runs them until stopRunners
// is closed. A runner is counted busy when it starts.
func (w *Worker) runnerLoop(ctx context.Context) {
	ht := newHandlerTimer(ctx)
	defer ht.stop()
	for {
		var it *item
		select {
		case it = <-w.queue:
		default:
			w.busyRunners.Add(-1)
			w.idleRunners.Add(1)
			select {
			case it = <-w.queue:
			case <-w.stopRunners:
				w.idleRunners.Add(-1)
				return
			}
			w.idleRunners.Add(-1)
			w.busyRunners.Add(1)
		}
		w.spawnRunner(ctx)     // more items may wait
		w.runItem(ctx, ht, it) // calls unbusy once
		w.running.Done()
		w.busyRunners.Add(1)
	}
}
