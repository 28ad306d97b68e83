package engine

import (
	"context"
	"sync"
)

// Runners: admitted items run on long-lived goroutines, one item at a
// time each. A goroutine started per record cost, per task, its creation
// and exit and the growth of its stack from the initial 2 KiB (copied at
// each doubling): about 2 us of the worker's CPU per task in
// BenchmarkThroughput, more than any other part of the worker's own path.
//
// A runner is a handler slot: there are at most Config.Concurrency of
// them. dispatch queues an admitted item (runQueue) and wakes one idle
// runner, or starts one when none is idle and fewer than Concurrency run;
// a runner takes the queued items one after the other, and waits for a
// wake-up when none is queued. Runners are woken one at a time: only when
// no woken runner has yet to take an item, a runner that takes an item
// while more wait wakes the next, so that every handler slot is used while
// items wait (within a wake-up's latency per runner), but a burst of items
// that the busy runners take quickly wakes few others. (Idle runners that
// waited on a channel of the items were each woken by the next item sent
// to it, so a micro-batch woke as many runners as were idle: up to one
// per task at a high Concurrency.) Runners exit when the worker stops
// (stopRunners).

// runner is what a runner keeps from one item to the next: nothing of a
// task.
type runner struct {
	ht   *handlerTimer // ends its handlers' contexts
	wake chan struct{} // buffered (1): a wake-up is never lost
}

// runQueue holds the admitted items that wait for a runner, and the idle
// runners.
type runQueue struct {
	mu     sync.Mutex
	items  []*item // items[head:] wait, oldest first
	head   int
	idle   []*runner
	n      int  // runners started
	waking bool // a runner was woken or started and has not taken an item yet
}

// dispatch queues it for a runner. Each item counts in e.running until
// runItem returned, then until its outcome is stored (see report). ctx
// is the worker's hard shutdown context (workCtx), the same for every
// item.
func (e *Engine) dispatch(ctx context.Context, it *item) {
	e.running.Add(1) // the caller holds records: the count is above 0
	// what the Limiter admitted it with (a concurrency slot) is renewed
	// while it waits for a handler slot and runs, and given back after
	e.renewLimit(ctx, it)
	q := &e.queue
	q.mu.Lock()
	q.items = append(q.items, it)
	e.wakeRunner(ctx)
	q.mu.Unlock()
}

// wakeRunner wakes an idle runner, or starts one if none is idle and
// fewer than Concurrency run, unless a runner woken before has yet to
// take an item (it wakes the next itself if items are left then). The
// queue's lock is held.
func (e *Engine) wakeRunner(ctx context.Context) {
	q := &e.queue
	switch {
	case q.waking:
	case len(q.idle) > 0:
		r := q.idle[len(q.idle)-1]
		q.idle = q.idle[:len(q.idle)-1]
		q.waking = true
		r.wake <- struct{}{}
	case q.n < e.cfg.Concurrency:
		q.n++
		q.waking = true
		e.runners.Go(func() { e.runnerLoop(ctx) })
	}
}

// next returns the next queued item for runner r, waiting for one while
// none is queued; nil when the worker stops. woken says whether r was
// just woken or started.
func (e *Engine) next(ctx context.Context, r *runner, woken bool) *item {
	q := &e.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if woken {
		q.waking = false
	}
	for q.head == len(q.items) {
		q.idle = append(q.idle, r)
		q.mu.Unlock()
		select {
		case <-r.wake:
		case <-e.stopRunners:
			q.mu.Lock()
			return nil
		}
		q.mu.Lock()
		q.waking = false
	}
	it := q.items[q.head]
	q.items[q.head] = nil
	if q.head++; q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else {
		e.wakeRunner(ctx) // more wait: the next runner
	}
	return it
}

// runnerLoop runs queued items until stopRunners is closed.
func (e *Engine) runnerLoop(ctx context.Context) {
	r := &runner{ht: newHandlerTimer(ctx), wake: make(chan struct{}, 1)}
	defer r.ht.stop()
	for woken := true; ; woken = false {
		it := e.next(ctx, r, woken)
		if it == nil {
			return
		}
		e.runItem(ctx, r, it)
		e.running.Done()
	}
}
