package scheduler

import (
	"container/heap"
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/schedule"
)

// The leader's view of the schedules (issue 40: an idle schedule costs
// nothing between its ticks).
//
// A leader loads every schedule and state once (one etcd transaction at
// revision R), compiles each spec once, and then follows the changes with
// a watch on the schedules prefix from R+1: a pass reads nothing from
// etcd and plans only the schedules that are due. The states need no
// watch: only the leader writes them (fenced), and its view takes every
// state it wrote. A schedule is due (its wake time has come) when
//
//   - it changed, is new, or has no state (at once);
//   - its next tick after the state's Through enters the lookahead
//     (the tick minus the lookahead);
//   - its first pending tick passes (it leaves the state's Pending).
//
// Between these moments a pass of the old kind (every schedule planned)
// would do nothing for it: no tick to write, no state change; so planning
// only the due ones changes nothing but the cost. A pass that fails drops
// the view (the next one loads again, as every pass did before), and so
// does a broken watch; the view is also reloaded every resyncEvery, as a
// safety net that costs one load of every schedule per period.

// never is the wake time of a schedule that needs no pass until it
// changes (paused, ended, or not compiling).
const never = math.MaxInt64

// resyncEvery is how often a leader loads its view again in full.
const resyncEvery = 10 * time.Minute

// entry is one schedule in the view.
type entry struct {
	sch schedule.Schedule
	c   *schedule.Compiled // nil: the spec does not compile (or bad)
	// bad: the key's value does not decode (or the key is no id): the
	// schedule is skipped and its state kept
	bad  bool
	st   schedule.State
	had  bool  // st was read or written (the schedule has a state)
	wake int64 // unix ms; the first pass at or after it plans the schedule
	idx  int   // index in the view's heap; -1 when not in it
}

// view is the leader's copy of the schedules and their states.
type view struct {
	rev      int64 // the etcd revision loaded
	loadedAt time.Time
	watched  bool // a watch from rev+1 feeds the view (else each pass loads again)
	entries  map[string]*entry
	nbad     int // entries that are bad
	// gone are the states of deleted schedules: their pending ticks are
	// cancelled and the states deleted by the next pass
	gone  map[string]schedule.State
	queue wakeQueue
}

// newView builds the view of a snapshot; the scheduler compiles each
// spec (counting and logging the ones that do not compile).
func (s *Scheduler) newView(snap schedule.Snapshot, now time.Time) *view {
	v := &view{rev: snap.Rev, loadedAt: now, entries: make(map[string]*entry, len(snap.Schedules)), gone: map[string]schedule.State{}}
	for id, sch := range snap.Schedules {
		st, had := snap.States[id]
		v.entries[id] = &entry{sch: sch, c: s.compile(sch), st: st, had: had, idx: -1}
	}
	for _, id := range snap.Bad {
		st, had := snap.States[id]
		v.entries[id] = &entry{sch: schedule.Schedule{ID: id}, bad: true, st: st, had: had, idx: -1}
	}
	v.nbad = len(snap.Bad)
	if len(snap.Bad) > 0 {
		s.log.Warn("schedules that do not decode are skipped; their states are kept", "count", len(snap.Bad),
			"ids", strings.Join(snap.Bad[:min(len(snap.Bad), 10)], ","))
	}
	for id, st := range snap.States {
		if _, ok := v.entries[id]; !ok {
			v.gone[id] = st
		}
	}
	for _, e := range v.entries {
		v.reschedule(e, s.cfg.Lookahead)
	}
	return v
}

// compile compiles a schedule's spec; nil when it does not compile
// (counted, and logged once per revision).
func (s *Scheduler) compile(sch schedule.Schedule) *schedule.Compiled {
	c, err := schedule.Compile(sch.Spec)
	if err != nil {
		s.m.Errors.WithLabelValues(opCompile).Inc()
		if s.badRev[sch.ID] != sch.Revision {
			s.badRev[sch.ID] = sch.Revision
			s.log.Error("schedule does not compile: skipped", "schedule", sch.ID, "revision", sch.Revision, "err", err)
		}
		return nil
	}
	delete(s.badRev, sch.ID)
	return c
}

// apply applies watched changes of schedule keys (in revision order).
func (s *Scheduler) apply(v *view, events []*clientv3.Event) {
	for _, ev := range events {
		sch, ok, err := s.sched.DecodeKV(ev.Kv)
		if !ok {
			continue
		}
		id := sch.ID
		old := v.entries[id]
		if old != nil {
			v.queue.remove(old)
			if old.bad {
				v.nbad--
			}
		}
		if ev.Type == clientv3.EventTypeDelete {
			delete(v.entries, id)
			if old != nil && old.had {
				v.gone[id] = old.st
			}
			delete(s.badRev, id)
			continue
		}
		e := &entry{sch: sch, idx: -1}
		if err != nil {
			e.bad = true
			v.nbad++
			s.log.Warn("a schedule that does not decode is skipped; its state is kept", "schedule", id, "err", err)
		} else {
			e.c = s.compile(sch)
		}
		// the state follows the id (also across a delete and a create
		// between two passes: the new spec cancels what it does not
		// produce, as for any change)
		switch st, wasGone := v.gone[id]; {
		case old != nil:
			e.st, e.had = old.st, old.had
		case wasGone:
			e.st, e.had = st, true
			delete(v.gone, id)
		}
		v.entries[id] = e
		v.reschedule(e, s.cfg.Lookahead)
	}
}

// reschedule computes e's wake time and queues it (not when never).
func (v *view) reschedule(e *entry, lookahead time.Duration) {
	v.queue.remove(e)
	e.wake = e.nextWake(lookahead)
	if e.wake != never {
		heap.Push(&v.queue, e)
	}
}

// nextWake is the first time (unix ms) a pass would do something for the
// schedule: see the package's view comment.
func (e *entry) nextWake(lookahead time.Duration) int64 {
	if e.bad || e.c == nil {
		return never
	}
	if !e.had || e.st.SpecRev != e.sch.Revision {
		return 0 // changed: at once
	}
	w := int64(never)
	if len(e.st.Pending) > 0 {
		w = slices.Min(e.st.Pending)
	}
	if e.sch.Paused {
		// a paused schedule's state keeps no pending ticks
		if w != never {
			return 0
		}
		return never
	}
	if n, ok := e.c.Next(time.UnixMilli(e.st.Through)); ok {
		// (UnixMilli rounds down: a wake a little early plans nothing)
		w = min(w, n.Add(-lookahead).UnixMilli())
	}
	return w
}

// due takes the schedules whose wake time is at or before now off the
// queue, in id order; the pass queues them again with their next wake.
func (v *view) due(now time.Time) []*entry {
	n := now.UnixMilli()
	var out []*entry
	for len(v.queue) > 0 && v.queue[0].wake <= n {
		out = append(out, heap.Pop(&v.queue).(*entry))
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.sch.ID, b.sch.ID) })
	return out
}

// schedules counts the schedules the view follows (not the bad ones).
func (v *view) schedules() int { return len(v.entries) - v.nbad }

// goneIDs are the deleted schedules whose states are to go, sorted.
func (v *view) goneIDs() []string { return slices.Sorted(maps.Keys(v.gone)) }

// wakeQueue is a min-heap of entries by wake time.
type wakeQueue []*entry

func (q wakeQueue) Len() int { return len(q) }
func (q wakeQueue) Less(i, j int) bool {
	return q[i].wake < q[j].wake || (q[i].wake == q[j].wake && q[i].sch.ID < q[j].sch.ID)
}
func (q wakeQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}

// Push implements heap.Interface.
func (q *wakeQueue) Push(x any) {
	e := x.(*entry)
	e.idx = len(*q)
	*q = append(*q, e)
}

// Pop implements heap.Interface.
func (q *wakeQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.idx = -1
	return e
}

// remove takes e off the queue if it is on it.
func (q *wakeQueue) remove(e *entry) {
	if e.idx >= 0 && e.idx < len(*q) && (*q)[e.idx] == e {
		heap.Remove(q, e.idx)
	}
	e.idx = -1
}

// catchUp applies the changes w collected to the view before a pass; a
// broken watch (or a view a failed pass dropped) drops both, and the
// pass loads the view again. It returns the watcher to go on with.
func (s *Scheduler) catchUp(w *watcher) *watcher {
	if w == nil {
		return nil
	}
	events, broken := w.take()
	if broken || s.view == nil || !s.view.watched {
		w.stop()
		s.view = nil
		return nil
	}
	s.apply(s.view, events)
	return w
}

// follow starts a watch from the view's revision after a pass loaded
// the view (stopping the old one); it returns the watcher to go on with.
func (s *Scheduler) follow(ctx context.Context, w *watcher, changes chan<- struct{}) *watcher {
	v := s.view
	if v == nil || v.watched {
		return w
	}
	w.stop()
	v.watched = true
	return s.watch(ctx, v.rev+1, changes)
}

// watcher follows the schedule keys from a revision on, collecting their
// events for the lead loop; a watch that breaks (compaction, no etcd
// leader, an error) is reported, and the leader loads its view again.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []*clientv3.Event
	rev    int64 // the changes up to this revision are collected
	broken bool
}

// watch starts a watcher from rev; every batch of events (and a break)
// signals changes. stop ends it.
func (s *Scheduler) watch(ctx context.Context, rev int64, changes chan<- struct{}) *watcher {
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{}), rev: rev - 1}
	signal := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(w.done)
		wch := s.cfg.Client.Watch(clientv3.WithRequireLeader(wctx), schedule.Prefix(s.cfg.Namespace),
			clientv3.WithPrefix(), clientv3.WithRev(rev))
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				if wctx.Err() == nil {
					s.log.Info("schedule watch ended: the view is loaded again", "err", resp.Err())
				}
				break
			}
			if len(resp.Events) == 0 {
				continue
			}
			w.mu.Lock()
			w.events = append(w.events, resp.Events...)
			w.rev = resp.Header.Revision
			w.mu.Unlock()
			signal()
		}
		w.mu.Lock()
		w.broken = true
		w.mu.Unlock()
		signal()
	}()
	return w
}

// take returns the events collected since the last take, and whether
// the watch broke (then the events do not matter: the view is reloaded).
func (w *watcher) take() ([]*clientv3.Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.events
	w.events = nil
	return ev, w.broken
}

// seen is the revision up to which changes are collected.
func (w *watcher) seen() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rev
}

// stop ends the watcher and waits for its goroutine; nil is a no-op.
func (w *watcher) stop() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
}
