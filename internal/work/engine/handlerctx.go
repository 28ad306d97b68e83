package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// handlerCtx is a handler's context: its parent's values, done at its
// deadline (context.DeadlineExceeded) or when its parent is done (the
// parent's error), or cancelled when the handler returned, like
// context.WithDeadline's. It is cheaper per task: context.WithTimeout
// allocated a timer per task and registered each context with its
// parent (about 1.8 us of the worker's CPU per task in
// BenchmarkThroughput); a handlerCtx is one small allocation, ended at
// its deadline by its runner's reused timer and at the parent's end by
// its runner's one registration with the parent (see runner.start). Its
// Done channel is made only when asked for. It is also what a rate-limit
// lease cancels with a cause (endCause), without a context of its own per
// task.
type handlerCtx struct {
	parent   context.Context
	vals     context.Context // nil: parent's values; else these (a child of parent's: its trace context)
	deadline time.Time
	// caused is set by endCause before it ends c: a cancelled
	// context.WithCancelCause over c's values, which Value answers
	// context.Cause's lookup with (the only way a context of another
	// package can carry a cause)
	caused atomic.Pointer[context.Context]

	mu     sync.Mutex
	done   chan struct{} // nil until Done is called or the context ends
	err    error
	nextAF int
	afters []afterFunc // AfterFunc's functions not yet run or stopped (a webhook call registers one)
}

// afterFunc is a function of AfterFunc and its id (for its stop).
type afterFunc struct {
	id int
	f  func()
}

// closedDone is the Done channel of a context that ended before anyone
// asked for it.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *handlerCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *handlerCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *handlerCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *handlerCtx) Value(key any) any {
	if cc := c.caused.Load(); cc != nil {
		return (*cc).Value(key)
	}
	if c.vals != nil {
		return c.vals.Value(key)
	}
	return c.parent.Value(key)
}

func (c *handlerCtx) String() string { return "worker.handlerCtx" }

// AfterFunc lets contexts derived from c (context.WithCancel(c), ...)
// and context.AfterFunc(c, f) follow c without a goroutine each, as with
// the standard library's contexts: f runs in its own goroutine once c
// ends.
func (c *handlerCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	id := c.nextAF
	c.nextAF++
	c.afters = append(c.afters, afterFunc{id: id, f: f})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, a := range c.afters {
			if a.id == id {
				c.afters = slices.Delete(c.afters, i, i+1)
				return true
			}
		}
		return false
	}
}

// end ends c with err unless it ended already.
func (c *handlerCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.endLocked(err)
}

// endLocked ends c with err; c.mu is held and c has not ended.
func (c *handlerCtx) endLocked(err error) {
	c.err = err
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
	for _, a := range c.afters {
		go a.f()
	}
	c.afters = nil
}

// endCause cancels c with cause (context.Cause(c) returns it; Err is
// context.Canceled) unless it ended already.
func (c *handlerCtx) endCause(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	base := c.vals
	if base == nil {
		base = c.parent
	}
	// WithoutCancel: its values, no registration with its parent
	cc, cancel := context.WithCancelCause(context.WithoutCancel(base))
	cancel(cause)
	c.caused.Store(&cc)
	c.endLocked(context.Canceled)
}

// handlerTimer ends a runner's current handler context at its deadline
// and when the runner's parent context ends. It is reused for every task
// the runner runs, and it is not set again for each of them: the timer
// stays armed for the earliest deadline it was set for, and when it fires
// it ends the current context if that one's deadline passed, or arms
// itself for that deadline. A task that returns before its timeout (most
// do) costs no timer operation at all unless its deadline comes before
// the one armed (setting a timer cost ~0.7 us per task).
type handlerTimer struct {
	parent  context.Context
	timer   *time.Timer
	stopAll func() bool // stops the parent registration

	mu      sync.Mutex
	cur     *handlerCtx // the running handler's context; nil between tasks
	armed   bool        // a fire of timer is pending (or has just run)
	armedAt time.Time   // when
}

// newHandlerTimer returns a handlerTimer for contexts derived from
// parent; stop it when its runner exits.
func newHandlerTimer(parent context.Context) *handlerTimer {
	h := &handlerTimer{parent: parent}
	h.timer = time.AfterFunc(time.Hour, h.expire)
	h.timer.Stop()
	h.stopAll = context.AfterFunc(parent, func() {
		h.mu.Lock()
		c := h.cur
		h.mu.Unlock()
		if c != nil {
			c.end(parent.Err())
		}
	})
	return h
}

// expire runs when the timer fires: it ends the current context if its
// deadline passed, or arms the timer for that deadline.
func (h *handlerTimer) expire() {
	now := time.Now()
	h.mu.Lock()
	h.armed = false // a stale run (the timer was set again meanwhile) only makes start set it again
	c := h.cur
	if c != nil && now.Before(c.deadline) {
		h.arm(now, c.deadline)
		c = nil
	}
	h.mu.Unlock()
	if c != nil {
		c.end(context.DeadlineExceeded)
	}
}

// arm sets the timer to fire at deadline; h.mu is held.
func (h *handlerTimer) arm(now, deadline time.Time) {
	h.timer.Reset(deadline.Sub(now))
	h.armed, h.armedAt = true, deadline
}

// startAt returns the context of a handler that starts now (its caller
// read the clock) and runs for at most timeout; call finish when it
// returned. One context at a time per handlerTimer.
func (h *handlerTimer) startAt(now time.Time, timeout time.Duration) *handlerCtx {
	return h.startWith(now, timeout, nil)
}

// startWith is startAt of a context whose values are vals' when not nil
// (a context derived from h's parent by adding values only: its trace
// context).
//
//nolint:revive // vals is not a context to run under: only its values are used
func (h *handlerTimer) startWith(now time.Time, timeout time.Duration, vals context.Context) *handlerCtx {
	c := &handlerCtx{parent: h.parent, vals: vals, deadline: now.Add(timeout)}
	if d, ok := h.parent.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d // ended by the parent then
	}
	h.mu.Lock()
	h.cur = c
	if timeout > 0 && (!h.armed || c.deadline.Before(h.armedAt)) {
		h.arm(now, c.deadline)
	}
	h.mu.Unlock()
	if err := h.parent.Err(); err != nil {
		c.end(err) // the parent ended before cur was set: its callback may have missed c
	} else if timeout <= 0 {
		c.end(context.DeadlineExceeded)
	}
	return c
}

// finish cancels c (the handler returned). The timer stays armed.
func (h *handlerTimer) finish(c *handlerCtx) {
	h.mu.Lock()
	h.cur = nil
	h.mu.Unlock()
	c.end(context.Canceled)
}

// stop releases the timer and the registration with the parent.
func (h *handlerTimer) stop() {
	h.timer.Stop()
	h.stopAll()
}
