package fire

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// parkFor is how long a refused task waits before it is fired again after
// its n-th refusal: 100ms doubling to at most 2s, and never past the end
// of its grace (so that it is made dead on time).
func parkFor(n int, left time.Duration) time.Duration {
	d := 2 * time.Second
	if n < 5 {
		d = 100 * time.Millisecond << max(n-1, 0)
	}
	return max(min(d, left), time.Millisecond)
}

// poisonTracker remembers when a poller first saw Kafka refuse each task
// (by generation) for good, for its grace. Entries not refused again
// within the grace plus a minute are dropped (the task was cancelled,
// rescheduled or fired meanwhile).
type poisonTracker struct {
	grace time.Duration
	m     *Metrics

	size   atomic.Int64 // len(seen), read without the lock
	mu     sync.Mutex
	seen   map[redisstore.Fired]*poisonEntry
	pruned time.Time
}

type poisonEntry struct {
	first, last time.Time
	n           int
}

func newPoisonTracker(grace time.Duration, m *Metrics) *poisonTracker {
	return &poisonTracker{grace: grace, m: m, seen: map[redisstore.Fired]*poisonEntry{}}
}

// refused records a refusal at (Redis' clock) and returns the first one's
// time, how many there were, and whether this is the first.
func (pt *poisonTracker) refused(f redisstore.Fired, at time.Time) (first time.Time, n int, isNew bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if at.Sub(pt.pruned) > pt.grace {
		pt.pruned = at
		for k, e := range pt.seen {
			if at.Sub(e.last) > pt.grace+time.Minute {
				pt.drop(k)
			}
		}
	}
	e, ok := pt.seen[f]
	if !ok {
		e = &poisonEntry{first: at}
		pt.seen[f] = e
		pt.size.Add(1)
		if pt.m != nil {
			pt.m.PoisonGrace.Inc()
		}
	}
	e.last = at
	e.n++
	return e.first, e.n, !ok
}

// fired forgets the tasks of a batch that Kafka confirmed (a topic was
// created within their grace); nearly free while nothing is tracked.
func (pt *poisonTracker) fired(tasks []*task.Task, errs []error) {
	if pt.size.Load() == 0 {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for i, t := range tasks {
		if errs[i] == nil {
			pt.drop(redisstore.Fired{ID: t.ID, Gen: t.Gen})
		}
	}
}

func (pt *poisonTracker) forget(f redisstore.Fired) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.drop(f)
}

func (pt *poisonTracker) drop(f redisstore.Fired) {
	if _, ok := pt.seen[f]; ok {
		delete(pt.seen, f)
		pt.size.Add(-1)
		if pt.m != nil {
			pt.m.PoisonGrace.Dec()
		}
	}
}

// close forgets everything (the poller ended: a next leader starts the
// grace again).
func (pt *poisonTracker) close() {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for k := range pt.seen {
		pt.drop(k)
	}
}
