package worker

import (
	"context"

	"github.com/delayq/delayq/internal/fault"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// maxFinishBatch bounds the outcomes one pipeline stores.
const maxFinishBatch = 256

// finisher coalesces the outcomes of concurrent tasks: one goroutine takes
// whatever outcomes are queued (up to maxFinishBatch) and stores them in
// one pipeline (redisstore.FinishMany). It never waits for more when the
// queue is empty, so an outcome alone costs one round trip as before.
type finisher struct {
	store *redisstore.Store
	reqs  chan finishReq
}

type finishReq struct {
	f     redisstore.Finish
	reply chan redisstore.FinishResult // buffered (1)
}

func newFinisher(store *redisstore.Store) *finisher {
	return &finisher{store: store, reqs: make(chan finishReq, maxFinishBatch)}
}

// finish stores one outcome through the next pipeline and returns what
// Store.Finish would. It gives up when ctx ends (the outcome may or may
// not be stored then).
func (c *finisher) finish(ctx context.Context, f redisstore.Finish) (task.State, error) {
	req := finishReq{f: f, reply: make(chan redisstore.FinishResult, 1)}
	select {
	case c.reqs <- req:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.State, r.Err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// run stores queued outcomes until stop is closed (after every caller
// returned). ctx bounds each pipeline.
func (c *finisher) run(ctx context.Context, stop <-chan struct{}) {
	reqs := make([]finishReq, 0, maxFinishBatch)
	fs := make([]redisstore.Finish, 0, maxFinishBatch)
	for {
		select {
		case r := <-c.reqs:
			reqs = append(reqs[:0], r)
		case <-stop:
			return
		}
	more:
		for len(reqs) < maxFinishBatch {
			select {
			case r := <-c.reqs:
				reqs = append(reqs, r)
			default:
				break more
			}
		}
		fs = fs[:0]
		for _, r := range reqs {
			fs = append(fs, r.f)
		}
		fault.Point("before-finish")
		res, _ := c.store.FinishMany(ctx, fs) // per-task errors in res
		for i, r := range reqs {
			r.reply <- res[i]
		}
	}
}
