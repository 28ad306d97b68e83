package worker

import "context"

// Runners: admitted items run on long-lived goroutines, one item at a
// time each. A goroutine started per record cost, per task, its creation
// and exit and the growth of its stack from the initial 2 KiB (copied at
// each doubling): about 2 us of the worker's CPU per task in
// BenchmarkThroughput, more than any other part of the worker's own path.
//
// dispatch hands an item to a runner that waits for one, or starts a new
// runner when none does; a runner that finished its item waits for the
// next. Items still wait for a handler slot (Config.Concurrency) inside
// runItem, as before, so there are as many runners as items were ever
// admitted at once (at most the records held, w.sem's capacity), each of
// which ran on its own goroutine before. Runners exit when the worker
// stops (stopRunners).

// runner is what a runner keeps from one item to the next: nothing of a
// task.
type runner struct {
	ht *handlerTimer // ends its handlers' contexts
}

// dispatch runs it on a runner. Each item counts in w.running until
// runItem returned, then until its outcome is stored (see report). ctx is the worker's hard shutdown context (workCtx),
// the same for every item.
func (w *Worker) dispatch(ctx context.Context, it *item) {
	w.running.Add(1) // the caller holds records: the count is above 0
	select {
	case w.idle <- it:
	default:
		w.runners.Go(func() { w.runnerLoop(ctx, it) })
	}
}

// runnerLoop runs it, then every item handed to it, until stopRunners is
// closed.
func (w *Worker) runnerLoop(ctx context.Context, it *item) {
	r := &runner{ht: newHandlerTimer(ctx)}
	defer r.ht.stop()
	for {
		w.runItem(ctx, r, it)
		w.running.Done()
		select {
		case it = <-w.idle:
		case <-w.stopRunners:
			return
		}
	}
}
