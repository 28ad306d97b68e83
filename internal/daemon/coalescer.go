package daemon

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
)

// coalescer groups concurrent single-task schedules (POST /v1/tasks) into
// one store call: a Redis round trip and a script call per group instead
// of per task. It adds no wait when the daemon is idle: a worker takes
// the first request, then only those already waiting (group commit).
//
// Requests are handed over on an unbuffered channel, so nothing queues
// inside the coalescer: once its workers stopped, a request falls back to
// scheduling on its own. Order: requests in one group are applied in the
// order the worker received them; requests that overlap in time have no
// order between them anyway.
type coalescer struct {
	app     *App
	reqs    chan *coalesced
	running atomic.Bool   // Run started (before that, requests go alone)
	stopped chan struct{} // closed when Run's workers are gone
}

// coalesceWorkers is how many store calls may be in flight at once;
// coalesceMax bounds one group.
const (
	coalesceWorkers = 2
	coalesceMax     = 256
)

type coalesced struct {
	sub  redisstore.Submit
	res  wire.Scheduled
	done chan struct{}
}

func newCoalescer(a *App) *coalescer {
	return &coalescer{app: a, reqs: make(chan *coalesced), stopped: make(chan struct{})}
}

// schedule schedules one task, grouped with concurrent ones.
func (c *coalescer) schedule(ctx context.Context, sub redisstore.Submit) wire.Scheduled {
	if !c.running.Load() {
		return c.app.schedule(ctx, []redisstore.Submit{sub})[0]
	}
	req := &coalesced{sub: sub, done: make(chan struct{})}
	select {
	case c.reqs <- req:
		<-req.done
		return req.res
	case <-c.stopped:
		return c.app.schedule(ctx, []redisstore.Submit{sub})[0]
	}
}

// Run serves groups until ctx ends.
func (c *coalescer) Run(ctx context.Context) error {
	c.running.Store(true)
	var wg sync.WaitGroup
	for range coalesceWorkers {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Wait()
	close(c.stopped)
	return nil
}

func (c *coalescer) work(ctx context.Context) {
	group := make([]*coalesced, 0, coalesceMax)
	subs := make([]redisstore.Submit, 0, coalesceMax)
	for {
		group = group[:0]
		select {
		case <-ctx.Done():
			return
		case r := <-c.reqs:
			group = append(group, r)
		}
	more:
		for len(group) < coalesceMax {
			select {
			case r := <-c.reqs:
				group = append(group, r)
			default:
				break more
			}
		}
		subs = subs[:0]
		for _, r := range group {
			subs = append(subs, r.sub)
		}
		c.app.m.groups.Observe(float64(len(subs)))
		out := c.app.schedule(context.WithoutCancel(ctx), subs)
		for i, r := range group {
			r.res = out[i]
			close(r.done)
		}
	}
}
