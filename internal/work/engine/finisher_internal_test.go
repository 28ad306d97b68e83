package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// A runner's reply channel is reused from one outcome to the next, but
// never after finish gave up on an answer: that answer, arriving late,
// must not be taken for the next outcome's.
func TestFinishReplyChannelReuse(t *testing.T) {
	c := &finisher{reqs: make(chan finishReq, 4)}
	var reply chan redisstore.FinishResult

	// answered: the channel is kept
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := <-c.reqs
		req.reply <- redisstore.FinishResult{State: task.StateSucceeded}
	}()
	st, err := c.finish(t.Context(), redisstore.Finish{ID: "a"}, &reply)
	<-done
	if err != nil || st != task.StateSucceeded || reply == nil {
		t.Fatalf("answered: %v, %v, channel %v", st, err, reply)
	}
	kept := reply
	st, err = func() (task.State, error) {
		go func() { req := <-c.reqs; req.reply <- redisstore.FinishResult{State: task.StateDead} }()
		return c.finish(t.Context(), redisstore.Finish{ID: "b"}, &reply)
	}()
	if err != nil || st != task.StateDead || reply != kept {
		t.Fatalf("second outcome: %v, %v; channel reused %v", st, err, reply == kept)
	}

	// given up after queuing: the channel is dropped, the late answer
	// lands in the old one
	ctx, cancel := context.WithCancel(t.Context())
	queued := make(chan finishReq, 1)
	go func() { req := <-c.reqs; queued <- req; cancel() }()
	if _, err := c.finish(ctx, redisstore.Finish{ID: "c"}, &reply); !errors.Is(err, context.Canceled) {
		t.Fatalf("given up: err %v", err)
	}
	if reply != nil {
		t.Fatal("the channel of an answer given up is still in use")
	}
	late := <-queued
	late.reply <- redisstore.FinishResult{State: task.StateDead} // never blocks: buffered

	go func() {
		req := <-c.reqs
		if req.reply == late.reply {
			t.Error("the next outcome got the given-up channel")
		}
		req.reply <- redisstore.FinishResult{State: task.StateSucceeded}
	}()
	st, err = c.finish(t.Context(), redisstore.Finish{ID: "d"}, &reply)
	if err != nil || st != task.StateSucceeded {
		t.Fatalf("after a give-up: %v, %v", st, err)
	}
}
