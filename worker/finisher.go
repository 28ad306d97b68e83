package worker

import (
	"context"
	"sync"

	"github.com/delayq/delayq/internal/fault"
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
// more than two made the pipelines smaller, and each script call has a
// fixed cost of ~8 us of Redis CPU per shard, without going faster).
// It never waits for more when the queue is empty, so an outcome alone
// costs one round trip.
type finisher struct {
	store *redisstore.Store
	reqs  chan finishReq
}

type finishReq struct {
	f     redisstore.Finish
	reply chan redisstore.FinishResult // buffered (1), empty
}

func newFinisher(store *redisstore.Store) *finisher {
	return &finisher{store: store, reqs: make(chan finishReq, maxFinishBatch)}
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
	req := finishReq{f: f, reply: *reply}
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
			defer func() { <-slots }()
			fs := make([]redisstore.Finish, len(reqs))
			for i, r := range reqs {
				fs[i] = r.f
			}
			fault.Point("before-finish")
			res, _ := c.store.FinishMany(ctx, fs) // per-task errors in res
			for i, r := range reqs {
				r.reply <- res[i]
			}
		})
	}
}
