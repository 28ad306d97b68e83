package engine

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A handler's context ends at its deadline with DeadlineExceeded, and
// contexts derived from it follow.
func TestHandlerCtxEndsAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		parent := context.WithValue(t.Context(), key{}, "v")
		ht := newHandlerTimer(parent)
		defer ht.stop()
		start := time.Now()
		c := startNow(ht, time.Second)
		if d, ok := c.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
			t.Fatalf("Deadline() = %v, %v; want %v", d, ok, start.Add(time.Second))
		}
		if c.Value(key{}) != "v" {
			t.Fatal("the parent's value is lost")
		}
		child, cancelChild := context.WithCancel(c)
		defer cancelChild()
		afterRan := make(chan struct{})
		context.AfterFunc(c, func() { close(afterRan) })
		stopped := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
		if !stopped() {
			t.Fatal("stop of a pending AfterFunc returned false")
		}

		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if c.Err() != nil || child.Err() != nil {
			t.Fatalf("ended before its deadline: %v, %v", c.Err(), child.Err())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed at the deadline")
		}
		<-afterRan
		if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v, Cause = %v; want DeadlineExceeded", c.Err(), context.Cause(c))
		}
		if !errors.Is(child.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(child), context.DeadlineExceeded) {
			t.Fatalf("derived context: Err() = %v, Cause = %v", child.Err(), context.Cause(child))
		}
		ht.finish(c)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("finish changed the error to %v", c.Err())
		}
	})
}

// The timer is reused: a task that returned early leaves nothing behind
// for the next one on the same runner, whose context is new and ends at
// its own deadline; the earlier context stays cancelled.
func TestHandlerCtxReusedTimerKeepsNoState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ht := newHandlerTimer(t.Context())
		defer ht.stop()
		c1 := startNow(ht, time.Second)
		done1 := c1.Done()
		time.Sleep(500 * time.Millisecond)
		ht.finish(c1) // the handler returned
		select {
		case <-done1:
		default:
			t.Fatal("a finished handler's context is not done")
		}
		if !errors.Is(c1.Err(), context.Canceled) {
			t.Fatalf("finished: Err() = %v, want Canceled", c1.Err())
		}

		c2 := startNow(ht, 10*time.Second)
		if c2 == c1 {
			t.Fatal("the context of a task was reused")
		}
		time.Sleep(time.Second) // past the first task's deadline
		synctest.Wait()
		if c2.Err() != nil {
			t.Fatalf("the first task's deadline ended the second: %v", c2.Err())
		}
		if !errors.Is(c1.Err(), context.Canceled) {
			t.Fatalf("the first context changed to %v", c1.Err())
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if !errors.Is(c2.Err(), context.DeadlineExceeded) {
			t.Fatalf("second task at its deadline: Err() = %v", c2.Err())
		}
		ht.finish(c2)

		// a shorter timeout after a longer one that returned at once
		ht.finish(startNow(ht, time.Hour))
		c3 := startNow(ht, time.Second)
		time.Sleep(time.Second)
		synctest.Wait()
		if !errors.Is(c3.Err(), context.DeadlineExceeded) {
			t.Fatalf("a deadline before the one armed: Err() = %v at the deadline", c3.Err())
		}
		ht.finish(c3)

		// many short tasks in a row, each ended by the timer
		for i := range 100 {
			c := startNow(ht, time.Duration(i+1)*time.Millisecond)
			<-c.Done()
			if !errors.Is(c.Err(), context.DeadlineExceeded) {
				t.Fatalf("task %d: Err() = %v", i, c.Err())
			}
			ht.finish(c)
		}
	})
}

// The parent's end ends the running handler's context with the parent's
// error, and a context started after it is done at once.
func TestHandlerCtxFollowsItsParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(t.Context())
		ht := newHandlerTimer(parent)
		defer ht.stop()
		c := startNow(ht, time.Minute)
		done := c.Done()
		stop := errors.New("stop")
		cancel(stop)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("the parent's end did not end the handler's context")
		}
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), stop) {
			t.Fatalf("Err() = %v, Cause = %v; want Canceled, stop", c.Err(), context.Cause(c))
		}
		ht.finish(c)

		c = startNow(ht, time.Minute)
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("started after the parent ended: Err() = %v", c.Err())
		}
		<-c.Done()
		ht.finish(c)
	})
}

// A parent deadline earlier than the task's timeout is the context's
// deadline, and the parent ends it then.
func TestHandlerCtxParentDeadlineFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		ht := newHandlerTimer(parent)
		defer ht.stop()
		want, _ := parent.Deadline()
		c := startNow(ht, time.Minute)
		if d, _ := c.Deadline(); !d.Equal(want) {
			t.Fatalf("Deadline() = %v, want the parent's %v", d, want)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v, want DeadlineExceeded", c.Err())
		}
		ht.finish(c)
	})
}

// startNow is startAt for a handler that starts now.
func startNow(h *handlerTimer, timeout time.Duration) *handlerCtx {
	return h.startAt(time.Now(), timeout)
}

// endCause (a rate-limit lease lost while the handler runs) ends the
// handler's context with Canceled and the cause, which contexts derived
// from it see too; its values stay; a context that ended before keeps its
// error, and a later end changes nothing.
func TestHandlerCtxEndCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		ht := newHandlerTimer(context.WithValue(t.Context(), key{}, "v"))
		defer ht.stop()
		c := startNow(ht, time.Minute)
		child, cancel := context.WithCancel(c)
		defer cancel()
		lost := errors.New("slot lost")
		c.endCause(lost)
		synctest.Wait()
		for name, ctx := range map[string]context.Context{"handler": c, "derived": child} {
			select {
			case <-ctx.Done():
			default:
				t.Fatalf("%s context not done after endCause", name)
			}
			if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), lost) {
				t.Fatalf("%s context: Err() = %v, Cause = %v; want Canceled, the cause", name, ctx.Err(), context.Cause(ctx))
			}
			if ctx.Value(key{}) != "v" {
				t.Fatalf("%s context lost its values", name)
			}
		}
		c.endCause(errors.New("again"))
		ht.finish(c)
		if !errors.Is(context.Cause(c), lost) {
			t.Fatalf("after a second endCause and finish: Cause = %v", context.Cause(c))
		}

		c = startNow(ht, time.Second)
		time.Sleep(time.Second)
		synctest.Wait()
		c.endCause(lost)
		if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Fatalf("endCause after the deadline: Err() = %v, Cause = %v", c.Err(), context.Cause(c))
		}
		ht.finish(c)
	})
}

// BenchmarkHandlerCtxAfterFunc: what a webhook call's cancel hook costs
// on a handler's context (issue 46; internal/work's handleFast registers
// one per call): context.AfterFunc, after the Done check that guarded it,
// against the context's own AfterFunc, which handleFast now asks directly.
// The context's allocation is in both.
//
//	go test ./internal/work/engine -run '^$' -bench BenchmarkHandlerCtxAfterFunc -benchmem
func BenchmarkHandlerCtxAfterFunc(b *testing.B) {
	f := func() {}
	hooks := map[string]func(c *handlerCtx) (stop func() bool){
		"context.AfterFunc": func(c *handlerCtx) func() bool {
			if c.Done() == nil {
				return nil
			}
			return context.AfterFunc(c, f)
		},
		"handlerCtx.AfterFunc": func(c *handlerCtx) func() bool { return c.AfterFunc(f) },
	}
	for _, name := range []string{"context.AfterFunc", "handlerCtx.AfterFunc"} {
		hook := hooks[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := &handlerCtx{parent: context.Background(), deadline: time.Now().Add(time.Minute)}
				if stop := hook(c); !stop() {
					b.Fatal("the hook ran or was gone")
				}
			}
		})
	}
}
