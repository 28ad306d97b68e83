package engine

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

// orderLimiter admits everything and records the ids of each Admit call.
type orderLimiter struct {
	mu    sync.Mutex
	calls [][]string
}

func (l *orderLimiter) Admit(_ context.Context, items []LimitItem) ([]LimitDecision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	l.calls = append(l.calls, ids)
	out := make([]LimitDecision, len(items))
	for i := range out {
		out[i].Run = true
	}
	return out, nil
}

func (l *orderLimiter) Done(context.Context, LimitItem, LimitDecision) {}

func (l *orderLimiter) seen() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Micro-batches ask the Limiter in the order they were fetched when they
// hold records of one key: a later batch whose claims came back first
// waits for the earlier one holding its key (also through a batch in
// between that ends without asking), and a batch of other keys does not
// wait at all.
func TestAdmitInFetchOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &orderLimiter{}
		e := &Engine{cfg: Config{Limiter: lim}, log: slog.New(slog.DiscardHandler)}
		o := newAdmitOrder()
		msgs := func(keys ...string) []kafka.Message {
			out := make([]kafka.Message, len(keys))
			for i, k := range keys {
				out[i].Key = []byte(k)
			}
			return out
		}
		t1 := e.nextTurn(o, msgs("k", "x"))
		t2 := e.nextTurn(o, msgs("k"))
		t3 := e.nextTurn(o, msgs("k", "y"))
		t4 := e.nextTurn(o, msgs("z"))
		batch := func(id string) []*item { return []*item{{t: &task.Task{ID: id, Type: "t"}}} }
		var wg sync.WaitGroup
		// batch 3's claims are back first, then batch 4's; batch 2 ends
		// without asking (its end waits for batch 1)
		wg.Go(func() {
			defer t3.end()
			e.limit(t.Context(), batch("c"), t3)
		})
		wg.Go(func() {
			defer t4.end()
			e.limit(t.Context(), batch("d"), t4)
		})
		wg.Go(t2.end)
		synctest.Wait()
		if got, want := lim.seen(), [][]string{{"d"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("before the first batch asked, the Limiter was asked %v, want %v (only the batch of other keys)", got, want)
		}
		func() {
			defer t1.end()
			e.limit(t.Context(), batch("a"), t1)
		}()
		wg.Wait()
		if got, want := lim.seen(), [][]string{{"d"}, {"a"}, {"c"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("the Limiter was asked %v, want %v", got, want)
		}
		if len(o.pending) != 0 {
			t.Fatalf("%d keys still pending after every batch ended", len(o.pending))
		}
	})
	// without a Limiter there is no order to keep
	if (&Engine{}).nextTurn(newAdmitOrder(), nil) != nil {
		t.Fatal("a turn without a Limiter")
	}
}
