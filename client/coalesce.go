package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
)

// Concurrent Schedule calls share requests: a call that finds fewer than
// coalesceInflight requests in flight sends at once; the others wait for
// one of those to return and are then sent together, up to coalesceMax
// tasks or coalesceBytes of JSON, as one POST /v1/tasks/batch (group
// commit). An idle producer therefore sees no added wait and the same
// request as before (a group of one is a POST /v1/tasks); a busy one pays
// the HTTP round trip once per group instead of once per task. Each call
// still gets its own task's result, and its own error with the status the
// task would have got alone (the batch answer carries it per task). The
// daemon answers a batch only once every task of it is stored in Redis or
// journaled, as it answers a single task.
//
// Two requests in flight measured best (bench/compare, 16 goroutines, 2
// cores: 1 → 16.9k, 2 → 23.8k, 4 → 19-21k, 8 → 17.3k tasks/s; 14-16k
// without coalescing): fewer leave the daemon idle between groups, more
// make the groups small again.
//
// A sender that answered a group of more than one yields its processor
// once (runtime.Gosched) before it takes the next: the callers it woke
// then queue again first. Without it, the two senders' answers came close
// together, the one caller back first went alone, and every other request
// carried one task (16 goroutines: 5.1 tasks per request, 58% of the
// requests single; with it 6.9 and 18%, 15–25% more tasks/s;
// docs/benchmarks.md, Session 40).
const (
	coalesceInflight = 2
	coalesceMax      = 200
	coalesceBytes    = 256 << 10
	// tasks larger than this go alone (they would crowd a group)
	coalesceAlone = 32 << 10
)

// WithoutScheduleCoalescing sends every Schedule call as its own request.
func WithoutScheduleCoalescing() Option { return func(c *Client) { c.noCoalesce = true } }

type scheduleCall struct {
	// vals is the caller's context without its cancellation: the
	// request carries the caller's trace context (trace.go), and the
	// task's body carries it too, so each task of a group keeps its own
	vals context.Context
	body []byte
	res  Result
	err  error
	done chan struct{}
}

type coalescer struct {
	mu       sync.Mutex
	inflight int
	queue    []*scheduleCall
	// single: the batch endpoint refused a group for its size (a daemon
	// with a smaller DQ_MAX_BODY or DQ_MAX_BATCH): from then on, every
	// task goes alone
	single bool
}

// scheduleTask sends body (one encoded task) alone or with concurrent calls.
func (c *Client) scheduleTask(ctx context.Context, body []byte) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("delayq: POST /v1/tasks: %w", err)
	}
	co := &c.co
	co.mu.Lock()
	if c.noCoalesce || co.single || len(body) > coalesceAlone {
		co.mu.Unlock()
		return c.scheduleOne(ctx, body)
	}
	call := &scheduleCall{vals: context.WithoutCancel(ctx), body: body, done: make(chan struct{})}
	co.queue = append(co.queue, call)
	if co.inflight < coalesceInflight {
		co.inflight++
		go c.sendQueued()
	}
	co.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		co.mu.Lock()
		for i, q := range co.queue {
			if q == call { // not sent: it never will be
				co.queue = append(co.queue[:i], co.queue[i+1:]...)
				break
			}
		}
		co.mu.Unlock()
		// a call already sent may still be scheduled, as a request
		// cancelled in flight may
		return Result{}, fmt.Errorf("delayq: POST /v1/tasks: %w", ctx.Err())
	}
}

// sendQueued sends groups until the queue is empty.
func (c *Client) sendQueued() {
	co := &c.co
	for {
		co.mu.Lock()
		if len(co.queue) == 0 {
			co.inflight--
			co.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(co.queue) && n < coalesceMax && (n == 0 || size+len(co.queue[n].body) <= coalesceBytes) {
			size += len(co.queue[n].body) + 1
			n++
		}
		group := make([]*scheduleCall, n)
		copy(group, co.queue)
		co.queue = co.queue[n:]
		co.mu.Unlock()
		c.sendGroup(group)
		if len(group) > 1 {
			runtime.Gosched() // the callers just answered queue again first
		}
	}
}

// sendGroup sends one group and hands each call its result. The request
// runs under its own context: a caller that gives up does not cancel the
// others' tasks (the client's timeout bounds it). It carries the first
// call's values (its trace context).
func (c *Client) sendGroup(group []*scheduleCall) {
	ctx := group[0].vals
	if len(group) == 1 {
		group[0].res, group[0].err = c.scheduleOne(ctx, group[0].body)
		close(group[0].done)
		return
	}
	results, err := c.batchRaw(ctx, func(yield func([]byte) bool) {
		for _, call := range group {
			if !yield(call.body) {
				return
			}
		}
	}, len(group))
	var ae *APIError
	if err != nil && errors.As(err, &ae) && refusedForSize(ae) {
		// nothing of it was stored: the daemon refuses a batch before it
		// looks at its tasks; send them alone, now and from now on
		c.co.mu.Lock()
		c.co.single = true
		c.co.mu.Unlock()
		for _, call := range group {
			call.res, call.err = c.scheduleOne(call.vals, call.body)
			close(call.done)
		}
		return
	}
	for i, call := range group {
		switch {
		case err != nil:
			call.err = err
		case results[i].Err != nil:
			call.err = results[i].Err
		default:
			call.res = results[i].Result
		}
		close(call.done)
	}
}

// refusedForSize reports a batch the daemon refused as a whole for its
// size or count (DQ_MAX_BODY, DQ_MAX_BATCH).
func refusedForSize(e *APIError) bool {
	return e.Status == http.StatusRequestEntityTooLarge || e.Code == "batch_too_large" || e.Code == "too_large"
}

func (c *Client) scheduleOne(ctx context.Context, body []byte) (Result, error) {
	var r Result
	err := c.do(ctx, http.MethodPost, "/v1/tasks", rawBody(body), &r)
	return r, err
}

// batchRaw posts n encoded tasks as one batch. The results are in order;
// an item's error keeps the status the daemon gives it (the status the
// task would have got alone).
func (c *Client) batchRaw(ctx context.Context, tasks func(yield func([]byte) bool), n int) ([]BatchResult, error) {
	var resp struct {
		Results []struct {
			Result
			Error *APIError `json:"error"` // its "status" fills Status
		} `json:"results"`
	}
	b := []byte(`{"tasks":[`)
	i := 0
	for tb := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, tb...)
		i++
	}
	b = append(b, "]}"...)
	if err := c.do(ctx, http.MethodPost, "/v1/tasks/batch", rawBody(b), &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != n {
		return nil, fmt.Errorf("delayq: batch of %d tasks answered with %d results", n, len(resp.Results))
	}
	out := make([]BatchResult, n)
	for i, r := range resp.Results {
		out[i].Result = r.Result
		if r.Error != nil {
			out[i].Err = r.Error
		}
	}
	return out, nil
}
