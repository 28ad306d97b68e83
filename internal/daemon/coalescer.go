package daemon

import (
	"context"
	"runtime"
	"sync"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
)

// coalescer groups concurrent single-task schedules (POST /v1/tasks, an
// embedded producer's Schedule) into one store call: a Redis round trip
// and a script call per group instead of per task. It adds no wait when
// the daemon is idle: group commit, with the callers themselves as the
// committers (leader and followers, as LevelDB's writers).
//
//   - A caller that finds fewer than coalesceInflight store calls in flight
//     leads: it makes the store call itself, for the group it was given.
//   - Otherwise it queues and sleeps. When a leader's call returns, it
//     answers its group and, if callers queued meanwhile, makes the first
//     of them the next leader, with every queued caller (up to coalesceMax)
//     as its group.
//   - A leader that answered a group of more than one yields its
//     processor once (runtime.Gosched) before it looks at the queue. The
//     callers it just woke are runnable but have not run; a caller that
//     schedules again at once (a closed loop of producers) then queues for
//     the next group. Without the yield, the two calls in flight returned
//     close together, the queue held the one caller that had come back
//     first, and every other group was a group of one: embedded.Producer
//     ×16 in bench/compare made 4.7 tasks per store call, 44% of its
//     groups of one; with it 6.7 and 12%, and 10–25% more tasks/s for less
//     CPU per task (docs/benchmarks.md, Session 40). The yield costs a
//     caller nothing when nothing else is runnable, and at most one pass
//     of its processor's run queue otherwise.
//
// So a caller sleeps at most once, and no goroutine stands between the
// callers and Redis: a hand-over to a worker goroutine cost two wake-ups
// per task (the hand-over, then the answer) and one per group.
//
// Order: requests in one group are applied in the order they queued;
// requests that overlap in time have no order between them anyway. Before
// Run and after it returned, a caller schedules alone.
type coalescer struct {
	core *core

	mu       sync.Mutex
	running  bool          // between Run's start and its end
	inflight int           // store calls made by leaders now
	queue    []*coalesced  // callers waiting for a leader
	idle     chan struct{} // closed and cleared when inflight drops to 0 while Run is ending
}

// coalesceInflight is how many store calls may be in flight at once;
// coalesceMax bounds one group.
const (
	coalesceInflight = 2
	coalesceMax      = 256
)

type coalesced struct {
	sub  redisstore.Submit
	res  wire.Scheduled
	lead []*coalesced // set for the caller woken to lead: its group
	done chan struct{}
}

func newCoalescer(co *core) *coalescer {
	return &coalescer{core: co}
}

// schedule schedules one task, grouped with concurrent ones.
func (c *coalescer) schedule(ctx context.Context, sub redisstore.Submit) wire.Scheduled {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return c.core.schedule(ctx, []redisstore.Submit{sub})[0]
	}
	req := &coalesced{sub: sub}
	if c.inflight < coalesceInflight {
		c.inflight++
		c.mu.Unlock()
		c.lead(ctx, []*coalesced{req})
		return req.res
	}
	req.done = make(chan struct{})
	c.queue = append(c.queue, req)
	c.mu.Unlock()
	<-req.done
	if req.lead != nil {
		c.lead(ctx, req.lead)
	}
	return req.res
}

// lead makes the store call of a group (for its first caller, whose ctx
// this is), answers its callers and hands the lead to the first caller
// that queued meanwhile, if any.
func (c *coalescer) lead(ctx context.Context, group []*coalesced) {
	subs := make([]redisstore.Submit, len(group))
	for i, r := range group {
		subs[i] = r.sub
	}
	c.core.m.groups.Observe(float64(len(subs)))
	// one caller's end does not cancel the others' call
	out := c.core.schedule(context.WithoutCancel(ctx), subs)
	for i, r := range group {
		r.res = out[i]
		if i > 0 { // group[0] is this goroutine's own caller
			close(r.done)
		}
	}

	if len(group) > 1 {
		runtime.Gosched() // let the callers just answered queue again (above)
	}
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.inflight--
		if c.inflight == 0 && c.idle != nil {
			close(c.idle)
			c.idle = nil
		}
		c.mu.Unlock()
		return
	}
	n := min(len(c.queue), coalesceMax)
	next := make([]*coalesced, n)
	copy(next, c.queue)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:]) // the queue's array keeps no answered request
	c.queue = c.queue[:rest]
	c.mu.Unlock()
	next[0].lead = next
	close(next[0].done)
}

// Run serves groups until ctx ends, then waits for the store calls in
// flight; callers that queued behind them are served too.
func (c *coalescer) Run(ctx context.Context) error {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.running = false
	var idle chan struct{}
	if c.inflight > 0 {
		idle = make(chan struct{})
		c.idle = idle
	}
	c.mu.Unlock()
	if idle != nil {
		<-idle
	}
	return nil
}
