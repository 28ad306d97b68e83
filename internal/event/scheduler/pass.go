package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/task"
)

const (
	// maxUpcoming bounds the upcoming ticks of one schedule materialized
	// in one pass (the next pass goes on from the last one).
	maxUpcoming = 1000
	// maxLookups bounds the missed ticks of one schedule whose task is
	// looked up in one pass (a dead leader may have materialized them);
	// later ones are taken as not materialized.
	maxLookups = 1000
	// lookupsInFlight bounds the missed-tick lookups in flight at once.
	lookupsInFlight = 32
	// maxCounted bounds how many skipped ticks of one schedule one pass
	// counts (a long outage of a dense schedule).
	maxCounted = 100_000
)

func newUnregisteredMetrics() *Metrics { return NewMetrics(prometheus.NewRegistry()) }

// plan is what one pass does for one schedule.
type plan struct {
	id       string
	c        *schedule.Compiled
	old      schedule.State
	had      bool
	st       schedule.State // the state to write once the pass succeeded
	upcoming []time.Time    // materialized ahead of time
	caught   []time.Time    // missed, materialized by the catch-up policy
	found    []int64        // missed, found materialized already (unix ms)
	skipped  int            // missed, dropped
	cancel   []int64        // pending ticks to cancel
	// revive: the schedule changed in this pass; its ticks are written
	// with redisstore.Submit.Revive, so that a tick an earlier change (a
	// pause) cancelled fires again now that the spec produces it again
	revive bool
}

// pass is one round of the leader at now: take the schedules that are
// due from the view (view.go; loading it first when no watch keeps it
// current), cancel what changes dropped, materialize the ticks due up to
// now + lookahead (and the missed ones the catch-up policies keep), then
// write the changed states in one transaction fenced by fence. A Redis or
// etcd error leaves the states as they were and drops the view (the next
// pass loads it again and does the work again: every step is
// idempotent); errFenced when the fence failed.
func (s *Scheduler) pass(ctx context.Context, now time.Time, fence clientv3.Cmp) (err error) {
	defer func() {
		if err != nil {
			s.view = nil
		}
	}()
	v, err := s.currentView(ctx, now)
	if err != nil {
		return err
	}
	due := v.due(now)
	s.m.Planned.Add(float64(len(due)))
	plans, planned, err := s.planDue(ctx, now, due)
	if err != nil {
		return err
	}
	del, err := s.cancelDropped(ctx, v, plans)
	if err != nil {
		return err
	}
	created, cancelled, err := s.materialize(ctx, plans)
	if err != nil {
		return err
	}
	if err := s.writeStates(ctx, fence, plans, cancelled, del); err != nil {
		return err
	}
	// The view takes what was written; each planned schedule waits for
	// its next wake.
	for _, id := range del {
		delete(v.gone, id)
	}
	for _, e := range due {
		if p := planned[e]; p != nil {
			e.st, e.had = p.st, true
		}
		v.reschedule(e, s.cfg.Lookahead)
	}
	// Counted once the states are written (a failed pass is done again).
	s.count(plans, created, cancelled)
	return nil
}

// currentView is the view of the schedules at now: the one the watch
// keeps current, else loaded again (also every resyncEvery). With planAll
// every schedule of it is due.
func (s *Scheduler) currentView(ctx context.Context, now time.Time) (*view, error) {
	if s.view == nil || !s.view.watched || now.Sub(s.view.loadedAt) >= resyncEvery {
		snap, err := s.sched.Load(ctx)
		if err != nil {
			return nil, s.fail(opLoad, err)
		}
		s.view = s.newView(snap, now)
	}
	v := s.view
	s.m.Schedules.Set(float64(v.schedules()))
	if s.planAll {
		for _, e := range v.entries {
			if !e.bad {
				v.queue.remove(e)
				e.wake = 0
				heap.Push(&v.queue, e)
			}
		}
	}
	return v, nil
}

// planDue plans the due schedules; planned maps each entry to its plan (a
// schedule whose spec does not compile has none).
func (s *Scheduler) planDue(ctx context.Context, now time.Time, due []*entry) (plans []*plan, planned map[*entry]*plan, err error) {
	planned = make(map[*entry]*plan, len(due))
	for _, e := range due {
		p, err := s.planSchedule(ctx, now, e.sch, e.c, e.st, e.had)
		if err != nil {
			return nil, nil, err
		}
		if p != nil {
			plans = append(plans, p)
			planned[e] = p
		}
	}
	return plans, planned, nil
}

// cancelDropped cancels the pending ticks that changes dropped: those of
// deleted schedules (whose states it returns, to delete) and those the
// plans cancel. (A schedule whose value does not decode keeps its state:
// it is in the view, as bad.)
func (s *Scheduler) cancelDropped(ctx context.Context, v *view, plans []*plan) (del []string, err error) {
	var cancels []string
	for _, id := range v.goneIDs() {
		for _, t := range v.gone[id].Pending {
			cancels = append(cancels, schedule.TaskID(id, time.UnixMilli(t)))
		}
		del = append(del, id)
	}
	for _, p := range plans {
		for _, t := range p.cancel {
			cancels = append(cancels, schedule.TaskID(p.id, time.UnixMilli(t)))
		}
	}
	for _, id := range cancels {
		if err := s.cfg.Store.Cancel(ctx, id); err != nil {
			var se *redisstore.StateError
			if !errors.Is(err, redisstore.ErrNotFound) && !errors.As(err, &se) {
				return nil, s.fail(opCancel, err)
			}
		}
	}
	return del, nil
}

// materialize writes every plan's ticks as tasks in one call. created:
// the tick ids it created; cancelled: those whose id is taken by a
// cancelled task (cancelled by a user, or by a change of the schedule
// that a pass after it did not see as a change): they do not fire.
func (s *Scheduler) materialize(ctx context.Context, plans []*plan) (created, cancelled map[string]bool, err error) {
	var subs []redisstore.Submit
	for _, p := range plans {
		for _, t := range p.caught {
			subs = append(subs, redisstore.Submit{Task: p.c.Task(p.id, t), Revive: p.revive})
		}
		for _, t := range p.upcoming {
			subs = append(subs, redisstore.Submit{Task: p.c.Task(p.id, t), Revive: p.revive})
		}
	}
	created, cancelled = map[string]bool{}, map[string]bool{}
	if len(subs) == 0 {
		return created, cancelled, nil
	}
	res, err := s.cfg.Store.Schedule(ctx, subs)
	if err != nil {
		return nil, nil, s.fail(opSchedule, err)
	}
	for _, r := range res {
		switch {
		case r.Outcome == redisstore.Created:
			created[r.ID] = true
		case r.State == task.StateCancelled:
			cancelled[r.ID] = true
			s.log.Debug("schedule tick was cancelled: it does not fire", "task_id", r.ID)
		case r.Outcome == redisstore.Rejected:
			// fired (or cancelled) already with other content: the tick
			// is handled
			s.log.Debug("schedule tick exists in another state", "task_id", r.ID, "state", r.State)
		}
	}
	return created, cancelled, nil
}

// writeStates writes the states the plans changed (without the cancelled
// ticks) and deletes those in del, in one transaction fenced by fence.
func (s *Scheduler) writeStates(ctx context.Context, fence clientv3.Cmp, plans []*plan, cancelled map[string]bool, del []string) error {
	for _, p := range plans {
		if len(cancelled) > 0 {
			p.dropCancelled(cancelled)
		}
	}
	put := map[string]schedule.State{}
	for _, p := range plans {
		if !p.had || !equalState(p.old, p.st) {
			put[p.id] = p.st
		}
	}
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	if err := s.sched.WriteStates(ctx, fence, put, del); err != nil {
		if errors.Is(err, schedule.ErrFenced) {
			return errFenced
		}
		return s.fail(opWrite, err)
	}
	return nil
}

// count counts the pass' ticks by outcome (materialized, caught up,
// skipped) and logs the schedules that missed ticks.
func (s *Scheduler) count(plans []*plan, created, cancelled map[string]bool) {
	var mat, caught, skipped int
	for _, p := range plans {
		mat += len(p.found)
		skipped += p.skipped
		for _, t := range p.upcoming {
			if cancelled[schedule.TaskID(p.id, t)] {
				skipped++
			} else {
				mat++
			}
		}
		for _, t := range p.caught {
			switch id := schedule.TaskID(p.id, t); {
			case created[id]:
				caught++
			case cancelled[id]:
				skipped++
			default:
				mat++ // materialized by an earlier leader
			}
		}
		if p.skipped > 0 || len(p.caught) > 0 {
			s.log.Info("missed schedule ticks", "schedule", p.id, "catchup", p.c.Spec().EffectiveCatchup(),
				"caught_up", len(p.caught), "found_materialized", len(p.found), "skipped", p.skipped)
		}
	}
	s.m.Ticks.WithLabelValues(outcomeMaterialized).Add(float64(mat))
	s.m.Ticks.WithLabelValues(outcomeCaughtUp).Add(float64(caught))
	s.m.Ticks.WithLabelValues(outcomeSkipped).Add(float64(skipped))
}

// fail counts an error of op and wraps it.
func (s *Scheduler) fail(op string, err error) error {
	s.m.Errors.WithLabelValues(op).Inc()
	return fmt.Errorf("%s: %w", op, err)
}

// planSchedule decides what to do for one schedule, compiled to c, at
// now; nil when its spec does not compile (c nil: compile counted and
// logged it; its state is kept). Only the missed-tick lookups touch Redis.
func (s *Scheduler) planSchedule(ctx context.Context, now time.Time, sch schedule.Schedule, c *schedule.Compiled, old schedule.State, had bool) (*plan, error) {
	if c == nil {
		return nil, nil
	}
	p := &plan{id: sch.ID, c: c, old: old, had: had}
	st := schedule.State{SpecRev: old.SpecRev, Through: old.Through, Recent: slices.Clone(old.Recent)}
	pending := slices.Clone(old.Pending)
	// seen: the change of the schedule is new to this pass and at most a
	// lookahead old. Its ticks since the change were not missed by an
	// outage, only by the pass' delay: they are materialized (late by
	// less than a lookahead), whatever the catch-up policy.
	seen := false
	if !had || old.SpecRev != sch.Revision {
		// The schedule changed (or is new): ticks it no longer produces
		// are cancelled, those it still produces are materialized again
		// (with the new template); ticks before the change are not caught
		// up.
		changed := sch.UpdatedAt.UnixMilli()
		for _, t := range old.Pending {
			if t > changed && (sch.Paused || !produces(c, t)) {
				p.cancel = append(p.cancel, t)
			}
		}
		pending = nil
		p.revive = true
		st.SpecRev, st.Through = sch.Revision, changed
		seen = now.Sub(sch.UpdatedAt) <= s.cfg.Lookahead
		// a cancelled tick is no "last fired" tick
		st.Recent = slices.DeleteFunc(st.Recent, func(t int64) bool { return slices.Contains(p.cancel, t) })
	}
	if sch.Paused {
		st.Pending = nil
		p.st = st
		return p, nil
	}
	nowMS := now.UnixMilli()
	through := time.UnixMilli(st.Through)
	if through.Before(now) && !seen {
		if err := s.planMissed(ctx, p, sch, through, now); err != nil {
			return nil, err
		}
	}
	from := through
	if from.Before(now) && !seen {
		from = now
	}
	horizon := now.Add(s.cfg.Lookahead)
	up, more := c.Between(from, horizon, maxUpcoming)
	p.upcoming = up
	newThrough := horizon.UnixMilli()
	if more {
		newThrough = up[len(up)-1].UnixMilli()
	}
	handled := len(up) > 0 || len(p.caught) > 0 || len(p.found) > 0 || p.skipped > 0
	if handled || st.SpecRev != old.SpecRev || !had {
		st.Through = max(st.Through, newThrough)
	}
	// else: no tick in (Through, horizon]: Through stays, so that an
	// idle schedule costs no write

	for _, t := range pending {
		if t > nowMS {
			st.Pending = append(st.Pending, t)
		}
	}
	for _, t := range up {
		if t.UnixMilli() > nowMS {
			st.Pending = append(st.Pending, t.UnixMilli())
		}
	}
	slices.Sort(st.Pending)
	st.Pending = slices.Compact(st.Pending)
	recent := slices.Clone(p.found)
	for _, t := range p.caught {
		recent = append(recent, t.UnixMilli())
	}
	for _, t := range up {
		recent = append(recent, t.UnixMilli())
	}
	st.AddRecent(recent...)
	p.st = st
	return p, nil
}

// dropCancelled removes the ticks whose task is cancelled from the
// state's pending and recent ticks (they will not fire).
func (p *plan) dropCancelled(cancelled map[string]bool) {
	gone := func(t int64) bool { return cancelled[schedule.TaskID(p.id, time.UnixMilli(t))] }
	p.st.Pending = slices.DeleteFunc(p.st.Pending, gone)
	p.st.Recent = slices.DeleteFunc(p.st.Recent, gone)
}

// planMissed applies the catch-up policy to the ticks in (through, now]:
// they were not materialized in time by any leader we know of. A tick
// whose task exists was materialized by a leader that died before it
// wrote its state; it counts as materialized.
func (s *Scheduler) planMissed(ctx context.Context, p *plan, sch schedule.Schedule, through, now time.Time) error {
	c := p.c
	switch sch.EffectiveCatchup() {
	case schedule.CatchupAll:
		ticks, more := c.Between(through, now, schedule.MaxCatchup)
		p.caught = ticks
		if more {
			n := countTicks(c, ticks[len(ticks)-1], now)
			p.skipped += n
			s.log.Warn("too many missed ticks to catch up in one pass: the rest are skipped",
				"schedule", p.id, "caught_up", len(ticks), "skipped", n)
		}
		return nil
	case schedule.CatchupLast:
		last, ok := c.Last(through, now)
		if !ok {
			return nil
		}
		p.caught = []time.Time{last}
		return s.skipMissed(ctx, p, through, last.Add(-time.Millisecond))
	default: // none
		return s.skipMissed(ctx, p, through, now)
	}
}

// skipMissed skips the ticks in (after, through] whose task does not
// exist; the existing ones count as materialized (and recent).
func (s *Scheduler) skipMissed(ctx context.Context, p *plan, after, through time.Time) error {
	if !through.After(after) {
		return nil
	}
	ticks, more := p.c.Between(after, through, maxLookups)
	// the lookups go out lookupsInFlight at a time (one after the other,
	// a long outage of a dense schedule cost up to maxLookups round trips
	// in a row); found keeps the ticks' order
	exists := make([]bool, len(ticks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lookupsInFlight)
	for i, t := range ticks {
		g.Go(func() error {
			_, err := s.cfg.Store.Get(gctx, schedule.TaskID(p.id, t))
			switch {
			case err == nil || errors.Is(err, task.ErrCorrupt):
				exists[i] = true
			case errors.Is(err, redisstore.ErrNotFound):
			default:
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return s.fail(opLookup, err)
	}
	for i, t := range ticks {
		if exists[i] {
			p.found = append(p.found, t.UnixMilli())
		} else {
			p.skipped++
		}
	}
	if more {
		p.skipped += countTicks(p.c, ticks[len(ticks)-1], through)
	}
	return nil
}

// countTicks counts the ticks in (after, through], at most maxCounted.
func countTicks(c *schedule.Compiled, after, through time.Time) int {
	n := 0
	for n < maxCounted {
		ticks, more := c.Between(after, through, 1000)
		n += len(ticks)
		if !more || len(ticks) == 0 {
			break
		}
		after = ticks[len(ticks)-1]
	}
	return min(n, maxCounted)
}

// produces reports whether the schedule has a tick at t (unix ms).
func produces(c *schedule.Compiled, t int64) bool {
	at := time.UnixMilli(t)
	n, ok := c.Next(at.Add(-time.Millisecond))
	return ok && n.Equal(at)
}

func equalState(a, b schedule.State) bool {
	return a.SpecRev == b.SpecRev && a.Through == b.Through &&
		slices.Equal(a.Pending, b.Pending) && slices.Equal(a.Recent, b.Recent)
}
