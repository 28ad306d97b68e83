package systems

import (
	"sync"
	"time"
)

// Seen is when a task became visible to a consumer: At is the consumer's
// clock (Kafka poll return for delayq, handler start for asynq); Stamp is
// the Kafka record timestamp (delayq only: dq-fired-at, taken from Redis'
// clock before the produce).
type Seen struct {
	At    time.Time
	Stamp time.Time
}

// Recorder keeps the intended due time of every task and when each became
// visible, for firing-lag figures. Safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	due    map[string]time.Time
	first  map[string]Seen
	copies map[string]int
	total  int
	seenCh chan struct{} // signalled (non-blocking) on every new distinct task
}

// NewRecorder returns a recorder sized for about n tasks.
func NewRecorder(n int) *Recorder {
	return &Recorder{
		due:    make(map[string]time.Time, n),
		first:  make(map[string]Seen, n),
		copies: make(map[string]int, n),
		seenCh: make(chan struct{}, 1),
	}
}

// Expect records that id is due at due; call it before the task is sent.
func (r *Recorder) Expect(id string, due time.Time) {
	r.mu.Lock()
	r.due[id] = due
	r.mu.Unlock()
}

// Seen records one delivery of id.
func (r *Recorder) Seen(id string, s Seen) {
	r.mu.Lock()
	r.total++
	r.copies[id]++
	if _, ok := r.first[id]; !ok {
		r.first[id] = s
	}
	r.mu.Unlock()
	select {
	case r.seenCh <- struct{}{}:
	default:
	}
}

// Distinct is the number of distinct tasks seen.
func (r *Recorder) Distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.first)
}

// WaitDistinct waits until n distinct tasks were seen or until deadline;
// it reports whether n were seen.
func (r *Recorder) WaitDistinct(n int, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if r.Distinct() >= n {
			return true
		}
		select {
		case <-t.C:
			return r.Distinct() >= n
		case <-r.seenCh:
		case <-tick.C:
		}
	}
}

// Lookup returns the first delivery of id and how many copies arrived.
func (r *Recorder) Lookup(id string) (Seen, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first[id], r.copies[id]
}

// SeenSpan is the earliest and the latest first-delivery time of any task.
func (r *Recorder) SeenSpan() (first, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.first {
		if first.IsZero() || s.At.Before(first) {
			first = s.At
		}
		if s.At.After(last) {
			last = s.At
		}
	}
	return first, last
}

// Result is what a recorder saw for the expected tasks.
type Result struct {
	Visible    []time.Duration // first delivery (consumer clock) - due
	Stamp      []time.Duration // record timestamp - due (delayq only): the take
	Transit    []time.Duration // first delivery - record timestamp (delayq only): the produce call and the fetch
	Expected   int
	Missing    int // expected, never seen
	Duplicates int // deliveries beyond the first
	Unexpected int // seen, never expected
}

// Result computes the lags of every expected task.
func (r *Recorder) Result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Expected: len(r.due), Duplicates: r.total - len(r.first)}
	res.Visible = make([]time.Duration, 0, len(r.due))
	for id, due := range r.due {
		s, ok := r.first[id]
		if !ok {
			res.Missing++
			continue
		}
		res.Visible = append(res.Visible, s.At.Sub(due))
		if !s.Stamp.IsZero() {
			res.Stamp = append(res.Stamp, s.Stamp.Sub(due))
			res.Transit = append(res.Transit, s.At.Sub(s.Stamp))
		}
	}
	for id := range r.first {
		if _, ok := r.due[id]; !ok {
			res.Unexpected++
		}
	}
	return res
}
