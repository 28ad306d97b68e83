package engine

import (
	"context"
	"sync"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// maxFinishBatch bounds the outcomes one pipeline stores; maxFinishPipes
// bounds the pipelines in flight at once.
const (
	maxFinishBatch = 256
	maxFinishPipes = 2
)

// finisher coalesces the outcomes of concurrent tasks: one goroutine takes
// whatever outcomes are queued (up to maxFinishBatch) and stores them in
// one pipeline (redisstore.FinishMany), with up to maxFinishPipes pipelines
// in flight (one at a time made the finisher the worker's bottleneck: the
// handlers of a busy worker spent their time waiting for its round trip;
// more than two made the pipelines smaller, without going faster: each
// script call has a fixed cost, ~8 us of Redis CPU when a call held one
// shard, and a call of one redis-server now holds all its shards, each
// section with a fixed cost of its own).
// It never waits for more when the queue is empty, so an outcome alone
// costs one round trip.
type finisher struct {
	store Store
	reqs  chan finishReq
	// answered is given the answer about each outcome queued with queue,
	// on the goroutine of its pipeline; it must not block
	answered func(ctx context.Context, it *item, err error)
}

// finishReq is one outcome to store, and who takes the answer: finish's
// reply channel, or answered for the item of queue.
type finishReq struct {
	f     *redisstore.Finish
	reply chan redisstore.FinishResult // finish's: buffered (1), empty
	ctx   context.Context              // queue's: the item's
	it    *item                        // queue's
}

func newFinisher(store Store, answered func(ctx context.Context, it *item, err error)) *finisher {
	return &finisher{store: store, reqs: make(chan finishReq, maxFinishBatch), answered: answered}
}

// queue stores the outcome of it (it.out.f) through the next pipeline,
// without waiting for the answer: c.answered gets it. It reports false,
// having queued nothing, when ctx ended while the queue was full.
func (c *finisher) queue(ctx context.Context, it *item) bool {
	req := finishReq{f: &it.out.f, ctx: ctx, it: it}
	select {
	case c.reqs <- req: // the queue has room: no select on ctx as well
		return true
	default:
	}
	select {
	case c.reqs <- req:
		return true
	case <-ctx.Done():
		return false
	}
}

// finish stores one outcome through the next pipeline and returns what
// Store.Finish would. It gives up when ctx ends (the outcome may or may
// not be stored then). The answer comes through *reply, the caller's
// channel (buffered, 1), made when nil, and set to nil when finish gave
// up after queuing the outcome (its answer may still come into it).
func (c *finisher) finish(ctx context.Context, f redisstore.Finish, reply *chan redisstore.FinishResult) (task.State, error) {
	if *reply == nil {
		*reply = make(chan redisstore.FinishResult, 1)
	}
	req := finishReq{f: &f, reply: *reply}
	select {
	case c.reqs <- req: // the queue has room: no select on ctx as well
	default:
		select {
		case c.reqs <- req:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	select {
	case r := <-req.reply:
		return r.State, r.Err
	case <-ctx.Done():
		*reply = nil
		return "", ctx.Err()
	}
}

// run stores queued outcomes until stop is closed (after every caller
// returned), then waits for the pipelines in flight. ctx bounds each
// pipeline.
func (c *finisher) run(ctx context.Context, stop <-chan struct{}) {
	var pipes sync.WaitGroup
	defer pipes.Wait()
	slots := make(chan struct{}, maxFinishPipes)
	for {
		var reqs []finishReq
		select {
		case r := <-c.reqs:
			reqs = append(make([]finishReq, 0, 16), r)
		case <-stop:
			return
		}
		// a pipeline slot first: outcomes queue up meanwhile and go out
		// together
		slots <- struct{}{}
	more:
		for len(reqs) < maxFinishBatch {
			select {
			case r := <-c.reqs:
				reqs = append(reqs, r)
			default:
				break more
			}
		}
		pipes.Go(func() {
			fs := make([]redisstore.Finish, len(reqs))
			for i, r := range reqs {
				fs[i] = *r.f
			}
			at(stepBeforeFinish)
			res, _ := c.store.FinishMany(ctx, fs) // per-task errors in res
			<-slots                               // the answers are handed out after the round trip
			for i, r := range reqs {
				if r.it != nil {
					c.answered(r.ctx, r.it, res[i].Err)
				} else {
					r.reply <- res[i]
				}
			}
		})
	}
}
