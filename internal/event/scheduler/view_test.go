package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/testenv"
)

// The leader's view (issue 40): idle schedules cost nothing between their
// ticks, and planning only the due schedules of a watched view does what
// planning every schedule in every pass did.

// recorder records what a scheduler asks of the task store.
type recorder struct {
	taskStore
	mu  sync.Mutex
	ops []string
}

func (r *recorder) Schedule(ctx context.Context, subs []redisstore.Submit) ([]redisstore.Result, error) {
	r.mu.Lock()
	for _, s := range subs {
		r.ops = append(r.ops, fmt.Sprintf("schedule %s due %d revive %v", s.Task.ID, s.Task.DueAt.UnixMilli(), s.Revive))
	}
	r.mu.Unlock()
	return r.taskStore.Schedule(ctx, subs)
}

func (r *recorder) Cancel(ctx context.Context, id string) error {
	r.mu.Lock()
	r.ops = append(r.ops, "cancel "+id)
	r.mu.Unlock()
	return r.taskStore.Cancel(ctx, id)
}

// take returns the recorded operations, sorted, and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	slices.Sort(ops)
	return ops
}

// watched is a scheduler driven as lead drives it: the watched changes
// applied before each pass, a watch started after a pass that loaded.
type watched struct {
	e       *env
	s       *Scheduler
	w       *watcher
	changes chan struct{}
}

func (l *watched) pass(now time.Time, upto int64) {
	l.e.t.Helper()
	if l.w != nil && upto > 0 {
		testenv.WaitFor(l.e.t, 10*time.Second, "the watch to see the changes", func() bool { return l.w.seen() >= upto })
	}
	l.w = l.s.catchUp(l.w)
	l.e.pass(l.s, now)
	l.w = l.s.follow(l.e.t.Context(), l.w, l.changes)
}

func (l *watched) stop() { l.w.stop() }

// twinEnv is one side of TestViewMatchesPlanningAll: an env whose store
// reads a shared fake clock.
func twinEnv(t *testing.T, clock *time.Time) *env {
	e := newEnv(t)
	e.sched = schedule.NewStore(e.ec, e.ns).WithClock(func() time.Time { return *clock })
	return e
}

// TestViewMatchesPlanningAll: the same schedules and changes in two
// namespaces, passes at the same times: one scheduler plans every
// schedule in every pass from a fresh load (what a pass did before the
// view), the other plans only the due schedules of its watched view. They
// ask the same of Redis in every pass and write the same states, through
// changes, pauses, a delete and re-create between two passes, schedules
// that start and end, and an outage longer than the lookahead.
func TestViewMatchesPlanningAll(t *testing.T) {
	t0 := time.Date(2026, 6, 15, 11, 59, 50, 0, time.UTC)
	clock := t0
	ref, got := twinEnv(t, &clock), twinEnv(t, &clock)
	var recs [2]*recorder
	wrap := func(i int) func(taskStore) taskStore {
		return func(ts taskStore) taskStore { recs[i] = &recorder{taskStore: ts}; return recs[i] }
	}
	refS := ref.scheduler("ref", wrap(0))
	refS.planAll = true
	l := &watched{e: got, s: got.scheduler("view", wrap(1)), changes: make(chan struct{}, 1)}
	defer l.stop()

	var upto int64 // the revision of got's last schedule change
	put := func(id string, spec schedule.Spec) {
		ref.put(id, spec)
		upto = got.put(id, spec).Revision
	}
	del := func(id string) {
		if _, err := ref.sched.Delete(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		resp, err := got.ec.Delete(t.Context(), schedule.Key(got.ns, id))
		if err != nil || resp.Deleted != 1 {
			t.Fatalf("delete %s: %v %v", id, resp, err)
		}
		upto = resp.Header.Revision
	}
	spec := func(cron, tz string, catchup schedule.Catchup) schedule.Spec {
		return schedule.Spec{Cron: cron, Timezone: tz, Catchup: catchup, Task: schedule.Template{Type: "it.twin"}}
	}
	endAt, startAt := t0.Add(10*time.Second), t0.Add(20*time.Second)
	ends := spec("*/2 * * * * *", "", "")
	ends.EndAt = &endAt
	starts := spec("@every 3s", "", schedule.CatchupAll)
	starts.StartAt = &startAt
	paused := spec("* * * * * *", "", "")
	paused.Paused = true
	put("sec", spec("* * * * * *", "", ""))
	put("every7", spec("@every 7s", "", schedule.CatchupNone))
	put("berlin10", spec("*/10 * * * * *", "Europe/Berlin", schedule.CatchupAll))
	put("yearly", spec("0 0 0 1 1 *", "America/New_York", ""))
	put("paused", paused)
	put("ends", ends)
	put("starts", starts)

	ids := []string{"sec", "every7", "berlin10", "yearly", "paused", "ends", "starts", "late"}
	for step := range 110 {
		clock = t0.Add(time.Duration(step) * 500 * time.Millisecond)
		switch step {
		case 20:
			put("every7", spec("@every 5s", "", schedule.CatchupNone))
		case 30:
			s := spec("* * * * * *", "", "")
			s.Paused = true
			put("sec", s)
		case 36:
			put("sec", spec("* * * * * *", "", ""))
		case 44:
			del("berlin10")
		case 50:
			put("late", spec("*/4 * * * * *", "Asia/Kolkata", schedule.CatchupLast))
		case 56:
			del("every7")
			put("every7", spec("@every 2s", "", schedule.CatchupNone))
		case 85:
			y := spec("0 0 0 1 1 *", "America/New_York", "")
			y.Paused = true
			put("yearly", y)
		}
		if step >= 70 && step < 80 {
			continue // an outage of 5 s, longer than the lookahead (3 s)
		}
		ref.pass(refS, clock)
		l.pass(clock, upto)
		if a, b := recs[0].take(), recs[1].take(); !slices.Equal(a, b) {
			t.Fatalf("step %d (%s): the passes asked Redis for different things:\nplanning all: %s\nwatched view: %s",
				step, clock.Format(time.RFC3339Nano), strings.Join(a, "; "), strings.Join(b, "; "))
		}
		for _, id := range ids {
			sa, oka := ref.state(id)
			sb, okb := got.state(id)
			if oka != okb || sa.Through != sb.Through || !slices.Equal(sa.Pending, sb.Pending) || !slices.Equal(sa.Recent, sb.Recent) {
				t.Fatalf("step %d (%s): state of %s: planning all %+v (%v), watched view %+v (%v)",
					step, clock.Format(time.RFC3339Nano), id, sa, oka, sb, okb)
			}
		}
	}
	// the view was loaded once: no failed pass, no broken watch
	if l.s.view == nil || l.w == nil {
		t.Fatal("the view was dropped")
	}
	for _, o := range []string{outcomeMaterialized, outcomeCaughtUp, outcomeSkipped} {
		if a, b := counter(t, refS.m.Ticks, o), counter(t, l.s.m.Ticks, o); a != b {
			t.Errorf("%s ticks: planning all %d, watched view %d", o, a, b)
		}
	}
	if n := counter(t, l.s.m.Ticks, outcomeSkipped) + counter(t, l.s.m.Ticks, outcomeCaughtUp); n == 0 {
		t.Error("the outage missed no tick: the test shows nothing about catch-up")
	}
}

// TestIdleSchedulesArePlannedAtTheirTicks: in a watched view, a pass
// plans only the schedules that are due: none between the ticks of idle
// schedules (no etcd read, no compile, no plan), each near its tick.
func TestIdleSchedulesArePlannedAtTheirTicks(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	e.sched = e.sched.WithClock(func() time.Time { return at })
	e.putIdle(100)
	hourly := e.put("hourly", schedule.Spec{Cron: "0 0 * * * *", Task: schedule.Template{Type: "it.hourly"}})
	l := &watched{e: e, s: e.scheduler("p", nil), changes: make(chan struct{}, 1)}
	defer l.stop()
	planned := func() int { return int(counterValue(t, l.s.m.Planned)) }

	l.pass(at, hourly.Revision)
	if n := planned(); n != 101 {
		t.Fatalf("first pass planned %d, want every schedule (101)", n)
	}
	v, loaded := l.s.view, at
	// an hour of passes every 500 ms: only the hourly schedule, twice per
	// tick (its tick enters the lookahead, then passes); the view is
	// loaded again only by the resync
	for now := at.Add(500 * time.Millisecond); now.Before(at.Add(time.Hour + 10*time.Second)); now = now.Add(500 * time.Millisecond) {
		l.pass(now, 0)
		if l.s.view != v {
			if now.Sub(loaded) < resyncEvery {
				t.Fatalf("the view was loaded again at %s, %s after the last load", now, now.Sub(loaded))
			}
			v, loaded = l.s.view, now
		}
	}
	if n := planned() - 101; n != 2 {
		t.Fatalf("an hour of passes planned %d schedules, want 2 (the hourly tick entering the lookahead, then passing)", n)
	}
	next := at.Add(time.Hour)
	if tk := e.task("hourly", next); tk == nil {
		t.Fatalf("the hourly tick at %s was not materialized", next)
	}
	if st, _ := e.state("hourly"); len(st.Pending) != 0 || !slices.Contains(st.Recent, next.UnixMilli()) {
		t.Fatalf("hourly state after its tick: %+v", st)
	}
	// a change is planned at the next pass
	at = at.Add(time.Hour + 20*time.Second)
	ch := e.put("idle00007", schedule.Spec{Cron: "* * * * * *", Task: schedule.Template{Type: "it.now"}})
	l.pass(at, ch.Revision)
	if n := planned() - 103; n != 1 {
		t.Fatalf("the pass after a change planned %d, want 1", n)
	}
	if tk := e.task("idle00007", at.Truncate(time.Second).Add(time.Second)); tk == nil {
		t.Fatal("the changed schedule's next tick was not materialized")
	}
}

// TestBrokenWatchLoadsTheView: a watch that cannot follow (its revision
// compacted away) drops the view; the next pass loads it again and sees
// the change the watch missed.
func TestBrokenWatchLoadsTheView(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("p", nil)
	sch := e.put("a", everySecond("it.a"))
	now := sch.UpdatedAt
	e.pass(s, now) // loads the view
	old := s.view
	ch := e.put("b", everySecond("it.b"))
	if _, err := e.ec.Compact(t.Context(), ch.Revision); err != nil {
		t.Fatal(err)
	}
	changes := make(chan struct{}, 1)
	w := s.follow(t.Context(), nil, changes) // from the view's revision + 1: compacted
	testenv.WaitFor(t, 10*time.Second, "the watch to break", func() bool { _, broken := w.take(); return broken })
	if w = s.catchUp(w); w != nil || s.view != nil {
		t.Fatal("a broken watch kept the view")
	}
	e.pass(s, now.Add(100*time.Millisecond))
	if s.view == nil || s.view == old {
		t.Fatal("the pass did not load the view again")
	}
	if st, ok := e.state("b"); !ok || len(st.Pending) == 0 {
		t.Fatalf("the schedule created while the watch was broken: state %+v %v", st, ok)
	}
	select {
	case <-changes:
	default:
		t.Error("a broken watch did not signal the lead loop")
	}
}

// counterValue is a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
