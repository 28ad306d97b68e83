package engine

import (
	"sync"
	"time"
)

// The lease of a concurrency slot needs a timer only once its first
// renewal (or its fence) is near, and most admitted tasks end long before
// that: a slot's first renewal is due a third of its TTL after admission,
// at least 333 ms (ratelimit.MinSlotTTL / 3). A timer of its own per
// admitted task (time.AfterFunc, its closure, its Stop) cost a worker
// about half a microsecond per task (BenchmarkLeasedRun). So a lease whose
// first timer is at least two grains away waits in a leaseWatch bucket:
// one timer per grain of time for every lease whose timer is due in the
// grain after it. When a bucket's timer fires, each lease still in it gets
// its own timer, set for the instant the lease asked for: a lease's timer
// fires exactly when it did before; only a task that runs that long pays
// for one. A lease that stops leaves its bucket at once (nothing is kept
// for an ended task); an empty bucket stays until its timer fires, so that
// a worker running one short task at a time makes no bucket per task.
//
// The grain is leaseGrain, doubled until a lease's first timer is at most
// leaseGrains grains away: a long slot TTL (up to a day) keeps as few
// buckets as a short one, and a lease gets its own timer at most two of
// its grains (a thirty-second of its wait) before it fires.
const (
	leaseGrain  = 50 * time.Millisecond
	leaseGrains = 64
)

// leaseWatch holds the leases whose own timer is not armed yet, by the
// grain their timer is due in. The zero value is ready.
type leaseWatch struct {
	mu      sync.Mutex
	epoch   time.Time // grain 0 of every size begins here (the first add)
	buckets map[grainKey]*leaseBucket
}

// grainKey names a grain: its size and its number since the epoch.
type grainKey struct {
	size time.Duration
	n    int64
}

// leaseBucket is the leases whose timer is due in one grain, a doubly
// linked list through limitLease.prev/next.
type leaseBucket struct {
	key  grainKey
	head *limitLease
}

// grainFor is the grain size of a lease whose first timer is d away.
func grainFor(d time.Duration) time.Duration {
	g := leaseGrain
	for d > leaseGrains*g {
		g *= 2
	}
	return g
}

// add puts l in the bucket of the grain its timer (due at l.first, at
// least two leaseGrains from now) falls in; the bucket's timer fires at
// the start of the grain before.
func (w *leaseWatch) add(l *limitLease, wait time.Duration) {
	size := grainFor(wait)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buckets == nil {
		w.buckets, w.epoch = make(map[grainKey]*leaseBucket), time.Now()
	}
	key := grainKey{size, int64(l.first.Sub(w.epoch) / size)}
	b := w.buckets[key]
	if b == nil {
		b = &leaseBucket{key: key}
		w.buckets[key] = b
		time.AfterFunc(time.Until(w.epoch.Add(time.Duration(key.n-1)*size)), func() { w.fire(b) })
	}
	l.bucket, l.next = b, b.head
	if b.head != nil {
		b.head.prev = l
	}
	b.head = l
}

// remove takes l out of its bucket if it is still in one (it stopped
// before its timer was armed).
func (w *leaseWatch) remove(l *limitLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := l.bucket
	if b == nil {
		return
	}
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		b.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	}
	l.bucket, l.prev, l.next = nil, nil, nil
}

// fire arms the timer of every lease still in b.
func (w *leaseWatch) fire(b *leaseBucket) {
	w.mu.Lock()
	delete(w.buckets, b.key)
	var ls []*limitLease
	for l := b.head; l != nil; {
		next := l.next
		l.bucket, l.prev, l.next = nil, nil, nil
		ls = append(ls, l)
		l = next
	}
	b.head = nil
	w.mu.Unlock()
	for _, l := range ls {
		l.arm()
	}
}
