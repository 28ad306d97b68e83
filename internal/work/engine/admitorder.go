package engine

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Admission in fetch order, per record key. Each micro-batch is claimed
// and admitted on a goroutine of its own, so a small batch fetched after
// a large one could ask the Limiter first, and the later task of a key
// would take the key's slot ahead of the earlier one the large batch
// holds: TestKeyLimits saw every key's second task start first on a
// loaded CI machine. A batch that holds a record of the same Kafka key as
// an earlier batch that has not asked the Limiter yet waits for it before
// its own Admit: a key's tasks (the record key is the task's key, or its
// id: what a key-scoped rule limits by) reach the Limiter in the order the
// worker fetched them. Batches with no key in common do not wait for each
// other (BenchmarkKeyLimits: every task its own key; ordering every batch
// after the one before cost 10-20% of the rate there), and only the Admit
// calls wait: claims still overlap. A rule scoped by a header is ordered
// by what the limiter sees, as before (docs/design.md, "Order per value").

// admitOrder is a fetch loop's record keys (hashed) of the batches that
// have not asked the Limiter yet: the latest such batch per key.
type admitOrder struct {
	seed    maphash.Seed
	mu      sync.Mutex
	pending map[uint64]*admitTurn
}

func newAdmitOrder() *admitOrder {
	return &admitOrder{seed: maphash.MakeSeed(), pending: make(map[uint64]*admitTurn)}
}

// admitTurn is one batch's place in its fetch loop's order.
type admitTurn struct {
	o     *admitOrder
	after []chan struct{} // done of the earlier batches holding one of its keys, still to ask
	keys  []uint64        // its keys' hashes (a collision only makes a batch wait)
	done  chan struct{}   // closed once it asked the Limiter, or ended without asking
	once  sync.Once
}

// nextTurn registers a batch's record keys with o; nil when there is no
// Limiter (no order to keep).
func (e *Engine) nextTurn(o *admitOrder, batch []kafka.Message) *admitTurn {
	if e.cfg.Limiter == nil {
		return nil
	}
	t := &admitTurn{o: o, keys: make([]uint64, len(batch)), done: make(chan struct{})}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range batch {
		h := maphash.Bytes(o.seed, batch[i].Key)
		t.keys[i] = h
		if p := o.pending[h]; p != nil && p != t && !containsChan(t.after, p.done) {
			t.after = append(t.after, p.done)
		}
		o.pending[h] = t
	}
	return t
}

func containsChan(cs []chan struct{}, c chan struct{}) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// wait returns when every earlier batch holding one of this batch's keys
// asked the Limiter (or ended), or ctx ended.
func (t *admitTurn) wait(ctx context.Context) {
	if t == nil {
		return
	}
	for _, c := range t.after {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
}

// end lets later batches holding its keys ask the Limiter: once this batch
// asked, or when it will not (it ends, or had nothing to ask). It first
// waits for the earlier batches of its keys, so that a batch that ends
// without asking lets no later one overtake those.
func (t *admitTurn) end() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		for _, c := range t.after {
			<-c
		}
		t.o.mu.Lock()
		for _, h := range t.keys {
			if t.o.pending[h] == t {
				delete(t.o.pending, h)
			}
		}
		t.o.mu.Unlock()
		close(t.done)
	})
}
