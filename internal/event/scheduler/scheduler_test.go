package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

func testLog(id string) *slog.Logger {
	if os.Getenv("DQ_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("proc", id)
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's Redis, etcd and namespace.
type env struct {
	t     testing.TB
	ec    *clientv3.Client
	store *redisstore.Store
	sched *schedule.Store
	ns    string
}

var nsCounter atomic.Int64

func newEnv(t testing.TB) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	e := testenv.StartEtcd(t)
	ns := fmt.Sprintf("sch%d", nsCounter.Add(1))
	store, err := redisstore.New(t.Context(), r.Client(t), redisstore.Options{Namespace: ns, Shards: 4, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ec := e.Client(t)
	return &env{t: t, ec: ec, store: store, sched: schedule.NewStore(ec, ns), ns: ns}
}

// scheduler is a scheduler of the env with a lookahead of 3s; its store
// may be wrapped.
func (e *env) scheduler(id string, wrap func(taskStore) taskStore) *Scheduler {
	e.t.Helper()
	var st taskStore = e.store
	if wrap != nil {
		st = wrap(st)
	}
	s, err := New(Config{
		Client: e.ec, Namespace: e.ns, Store: st, ID: id, TTL: 2 * time.Second,
		Interval: 50 * time.Millisecond, Lookahead: 3 * time.Second,
		Metrics: NewMetrics(prometheus.NewRegistry()), Log: testLog(id),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// open is a fence that always holds (no leader key involved).
func (e *env) open() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision("/"+e.ns+"/no-such-key"), "=", 0)
}

// closed is a fence that never holds.
func (e *env) closed() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision("/"+e.ns+"/no-such-key"), "=", 1)
}

func (e *env) put(id string, spec schedule.Spec) schedule.Schedule {
	e.t.Helper()
	sch, _, err := e.sched.Put(e.t.Context(), id, spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return sch
}

func (e *env) pass(s *Scheduler, now time.Time) {
	e.t.Helper()
	if err := s.pass(e.t.Context(), now, e.open()); err != nil {
		e.t.Fatalf("pass at %s: %v", now.Format(time.RFC3339Nano), err)
	}
}

func (e *env) state(id string) (schedule.State, bool) {
	e.t.Helper()
	st, ok, err := e.sched.State(e.t.Context(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return st, ok
}

// task returns a tick's task, nil when there is none.
func (e *env) task(id string, tick time.Time) *task.Task {
	e.t.Helper()
	tk, err := e.store.Get(e.t.Context(), schedule.TaskID(id, tick))
	if errors.Is(err, redisstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return tk
}

func counter(t *testing.T, c *prometheus.CounterVec, label string) int {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(label).Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetCounter().GetValue())
}

func everySecond(typ string) schedule.Spec {
	return schedule.Spec{Cron: "* * * * * *", Task: schedule.Template{Type: typ, Payload: []byte(`{"n":1}`)}}
}

// ticks are the whole seconds in (after, through].
func ticks(after, through time.Time) []time.Time {
	var out []time.Time
	for t := after.Truncate(time.Second).Add(time.Second); !t.After(through); t = t.Add(time.Second) {
		out = append(out, t)
	}
	return out
}

func ms(ts []time.Time) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.UnixMilli()
	}
	return out
}

func TestPassMaterializesTicksAhead(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("p1", nil)
	sch := e.put("sec", everySecond("it.sec"))
	now := sch.UpdatedAt // no tick can have been missed
	e.pass(s, now)

	want := ticks(now, now.Add(3*time.Second))
	if len(want) != 3 {
		t.Fatalf("test: %d ticks", len(want))
	}
	for _, tick := range want {
		tk := e.task("sec", tick)
		if tk == nil {
			t.Fatalf("tick %s: no task", tick)
		}
		if tk.State != task.StateScheduled || !tk.DueAt.Equal(tick) || tk.Type != "it.sec" || string(tk.Payload) != `{"n":1}` {
			t.Errorf("tick %s: task %+v", tick, tk)
		}
	}
	if tk := e.task("sec", want[2].Add(time.Second)); tk != nil {
		t.Errorf("a tick past the lookahead was materialized: %+v", tk)
	}
	st, ok := e.state("sec")
	if !ok || st.SpecRev != sch.Revision || st.Through != now.Add(3*time.Second).UnixMilli() {
		t.Errorf("state %+v (ok %v), want spec_rev %d through %d", st, ok, sch.Revision, now.Add(3*time.Second).UnixMilli())
	}
	if fmt.Sprint(st.Pending) != fmt.Sprint(ms(want)) || fmt.Sprint(st.Recent) != fmt.Sprint(ms(want)) {
		t.Errorf("pending %v recent %v, want %v", st.Pending, st.Recent, ms(want))
	}
	if n := counter(t, s.m.Ticks, outcomeMaterialized); n != 3 {
		t.Errorf("materialized %d, want 3", n)
	}

	// A later pass goes on from Through; fired ticks leave Pending.
	later := now.Add(1500 * time.Millisecond)
	e.pass(s, later)
	st, _ = e.state("sec")
	all := ticks(now, later.Add(3*time.Second))
	if fmt.Sprint(st.Pending) != fmt.Sprint(ms(ticks(later, later.Add(3*time.Second)))) {
		t.Errorf("pending %v after the second pass at %d", st.Pending, later.UnixMilli())
	}
	if n := counter(t, s.m.Ticks, outcomeMaterialized); n != len(all) {
		t.Errorf("materialized %d, want %d (each tick once)", n, len(all))
	}
	// The same pass again changes nothing.
	e.pass(s, later)
	if n := counter(t, s.m.Ticks, outcomeMaterialized); n != len(all) {
		t.Errorf("materialized %d after a repeated pass, want %d", n, len(all))
	}
}

// TestLatePassAfterAChange: the first pass after a change comes late
// (less than a lookahead): the ticks since the change are materialized
// late, not missed, even under catch-up none.
func TestLatePassAfterAChange(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("p1", nil)
	spec := everySecond("it.late")
	spec.Catchup = schedule.CatchupNone
	sch := e.put("late", spec)
	now := sch.UpdatedAt.Add(2500 * time.Millisecond)
	e.pass(s, now)
	want := ticks(sch.UpdatedAt, now.Add(3*time.Second))
	for _, tick := range want {
		if tk := e.task("late", tick); tk == nil {
			t.Errorf("tick %s: no task", tick)
		}
	}
	if n, sk := counter(t, s.m.Ticks, outcomeMaterialized), counter(t, s.m.Ticks, outcomeSkipped); n != len(want) || sk != 0 {
		t.Errorf("materialized %d skipped %d, want %d and 0", n, sk, len(want))
	}
	st, _ := e.state("late")
	if fmt.Sprint(st.Pending) != fmt.Sprint(ms(ticks(now, now.Add(3*time.Second)))) {
		t.Errorf("pending %v: only the ticks after now", st.Pending)
	}
}

func TestSpecChangeCancelsDroppedTicks(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("p1", nil)
	sch := e.put("chg", everySecond("it.old"))
	e.pass(s, sch.UpdatedAt)
	before, _ := e.state("chg")

	spec := everySecond("it.new")
	spec.Cron = "*/2 * * * * *"
	sch2 := e.put("chg", spec)
	now := sch2.UpdatedAt
	e.pass(s, now)

	for _, p := range before.Pending {
		tick := time.UnixMilli(p)
		tk := e.task("chg", tick)
		if tk == nil {
			t.Fatalf("tick %s: task gone", tick)
		}
		switch {
		case !tick.After(now): // due before the change: left alone
		case tick.Unix()%2 == 1:
			if tk.State != task.StateCancelled {
				t.Errorf("odd tick %s: %s, want cancelled (the new spec drops it)", tick, tk.State)
			}
		default:
			if tk.State != task.StateScheduled || tk.Type != "it.new" {
				t.Errorf("even tick %s: %s %s, want scheduled with the new template", tick, tk.State, tk.Type)
			}
		}
	}
	st, _ := e.state("chg")
	if st.SpecRev != sch2.Revision {
		t.Errorf("spec_rev %d, want %d", st.SpecRev, sch2.Revision)
	}
	for _, p := range st.Pending {
		if time.UnixMilli(p).Unix()%2 != 0 {
			t.Errorf("pending %v holds an odd tick", st.Pending)
		}
	}
	for _, r := range st.Recent {
		if r > now.UnixMilli() && time.UnixMilli(r).Unix()%2 != 0 {
			t.Errorf("recent %v holds a cancelled tick", st.Recent)
		}
	}
}

// TestChangeStartsAPass: a schedule created while the leader waits for
// its next pass (a minute away) is materialized at once (the watch).
func TestChangeStartsAPass(t *testing.T) {
	e := newEnv(t)
	s, err := New(Config{
		Client: e.ec, Namespace: e.ns, Store: e.store, ID: "w", TTL: 2 * time.Second,
		Interval: time.Minute, Lookahead: 2 * time.Minute, Log: testLog("w"),
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	testenv.WaitFor(t, 10*time.Second, "the leader's first pass", func() bool {
		var m dto.Metric
		_ = s.m.Pass.Write(&m)
		return m.GetHistogram().GetSampleCount() >= 1
	})
	e.put("w", everySecond("it.w"))
	testenv.WaitFor(t, 20*time.Second, "the new schedule materialized before the next timed pass", func() bool {
		st, ok := e.state("w")
		return ok && len(st.Pending) > 0
	})
}

func TestPauseResumeDelete(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("p1", nil)
	ctx := t.Context()
	sch := e.put("pr", everySecond("it.pr"))
	e.pass(s, sch.UpdatedAt)
	first, _ := e.state("pr")

	paused, changed, err := e.sched.SetPaused(ctx, "pr", true)
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	e.pass(s, paused.UpdatedAt)
	e.pass(s, paused.UpdatedAt.Add(2*time.Second)) // still paused: nothing new
	for _, p := range first.Pending {
		if p <= paused.UpdatedAt.UnixMilli() {
			continue
		}
		if tk := e.task("pr", time.UnixMilli(p)); tk == nil || tk.State != task.StateCancelled {
			t.Errorf("pending tick %d after the pause: %+v, want cancelled", p, tk)
		}
	}
	for _, tick := range ticks(paused.UpdatedAt.Add(3*time.Second), paused.UpdatedAt.Add(5*time.Second)) {
		if tk := e.task("pr", tick); tk != nil {
			t.Errorf("paused schedule materialized %s: %+v", tick, tk)
		}
	}
	if st, _ := e.state("pr"); len(st.Pending) != 0 {
		t.Errorf("paused state pending %v", st.Pending)
	}

	resumed, _, err := e.sched.SetPaused(ctx, "pr", false)
	if err != nil {
		t.Fatal(err)
	}
	e.pass(s, resumed.UpdatedAt)
	st, _ := e.state("pr")
	want := ticks(resumed.UpdatedAt, resumed.UpdatedAt.Add(3*time.Second))
	// A tick the pause cancelled is revived (redisstore.Submit.Revive):
	// every tick after the resume is scheduled and pending.
	revived := 0
	for _, p := range first.Pending {
		if p > paused.UpdatedAt.UnixMilli() && p > resumed.UpdatedAt.UnixMilli() {
			revived++
		}
	}
	if revived == 0 {
		t.Fatalf("no tick cancelled by the pause is due after the resume (pending %v, paused at %d, resumed at %d): the test shows nothing",
			first.Pending, paused.UpdatedAt.UnixMilli(), resumed.UpdatedAt.UnixMilli())
	}
	for _, tick := range want {
		if tk := e.task("pr", tick); tk == nil || tk.State != task.StateScheduled {
			t.Errorf("after resume tick %s: %+v, want scheduled", tick, tk)
		}
		if !slices.Contains(st.Pending, tick.UnixMilli()) {
			t.Errorf("tick %s is not pending after the resume: %v", tick, st.Pending)
		}
	}
	// a pause is not an outage: nothing is skipped or caught up
	if n, c := counter(t, s.m.Ticks, outcomeSkipped), counter(t, s.m.Ticks, outcomeCaughtUp); n != 0 || c != 0 {
		t.Errorf("skipped %d caught up %d, want 0 and 0", n, c)
	}

	if ok, err := e.sched.Delete(ctx, "pr"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	e.pass(s, resumed.UpdatedAt.Add(time.Millisecond))
	for _, tick := range want {
		if tk := e.task("pr", tick); tk == nil || tk.State != task.StateCancelled {
			t.Errorf("after delete tick %s: %+v, want cancelled", tick, tk)
		}
	}
	if _, ok := e.state("pr"); ok {
		t.Error("the deleted schedule's state is still there")
	}
}

// handledThrough puts schedule id and records that a leader handled it
// through missedFor before now = its creation + age, then died: it
// returns now, the missed ticks and the compiled spec.
func (e *env) handledThrough(id string, spec schedule.Spec, age, missedFor time.Duration) (time.Time, []time.Time, *schedule.Compiled) {
	e.t.Helper()
	sch := e.put(id, spec)
	now := sch.UpdatedAt.Add(age)
	through := now.Add(-missedFor)
	if err := e.sched.WriteStates(e.t.Context(), e.open(), map[string]schedule.State{
		id: {SpecRev: sch.Revision, Through: through.UnixMilli()},
	}, nil); err != nil {
		e.t.Fatal(err)
	}
	c, err := schedule.Compile(spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return now, ticks(through, now), c
}

// TestCatchup: a leader handled the schedule through ten seconds ago,
// materialized two more ticks and died before it wrote its state; the
// next leader's pass applies the catch-up policy to the rest.
func TestCatchup(t *testing.T) {
	for _, tc := range []struct {
		policy                     schedule.Catchup
		materialized, caught, skip int // of the 10 missed ticks (+3 upcoming materialized)
	}{
		{schedule.CatchupNone, 2, 0, 8},
		{schedule.CatchupLast, 2, 1, 7},
		{schedule.CatchupAll, 2, 8, 0},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			e := newEnv(t)
			s := e.scheduler("p1", nil)
			spec := everySecond("it.catchup")
			spec.Catchup = tc.policy
			now, missed, c := e.handledThrough("cu", spec, 20*time.Second, 10*time.Second)
			if _, err := e.store.Schedule(t.Context(), []redisstore.Submit{{Task: c.Task("cu", missed[0])}, {Task: c.Task("cu", missed[1])}}); err != nil {
				t.Fatal(err)
			}
			e.pass(s, now)

			present := 0
			for i, tick := range missed {
				tk := e.task("cu", tick)
				if tk != nil {
					present++
				}
				switch {
				case i < 2 && tk == nil:
					t.Errorf("tick %d: the dead leader's task is gone", i)
				case tc.policy == schedule.CatchupLast && i == len(missed)-1 && tk == nil:
					t.Errorf("last: the latest missed tick has no task")
				case tc.policy == schedule.CatchupLast && i >= 2 && i < len(missed)-1 && tk != nil:
					t.Errorf("last: missed tick %d materialized", i)
				case tc.policy == schedule.CatchupNone && i >= 2 && tk != nil:
					t.Errorf("none: missed tick %d materialized", i)
				case tc.policy == schedule.CatchupAll && tk == nil:
					t.Errorf("all: missed tick %d has no task", i)
				}
			}
			if present != tc.materialized+tc.caught {
				t.Errorf("%d missed ticks have tasks, want %d", present, tc.materialized+tc.caught)
			}
			got := [3]int{counter(t, s.m.Ticks, outcomeMaterialized), counter(t, s.m.Ticks, outcomeCaughtUp), counter(t, s.m.Ticks, outcomeSkipped)}
			if want := [3]int{tc.materialized + 3, tc.caught, tc.skip}; got != want {
				t.Errorf("ticks materialized/caught_up/skipped %v, want %v", got, want)
			}
			st, _ := e.state("cu")
			if st.Through != now.Add(3*time.Second).UnixMilli() {
				t.Errorf("through %d, want %d", st.Through, now.Add(3*time.Second).UnixMilli())
			}
			// The pass after is quiet: the missed ticks are handled.
			e.pass(s, now.Add(100*time.Millisecond))
			if n := counter(t, s.m.Ticks, outcomeSkipped); n != tc.skip {
				t.Errorf("skipped %d after the next pass, want %d", n, tc.skip)
			}
		})
	}
}

// TestCatchupLookupsOverlap: the missed ticks' tasks are looked up
// concurrently (a long outage of a dense schedule cost one round trip per
// tick in a row), and the outcome is what sequential lookups give.
func TestCatchupLookupsOverlap(t *testing.T) {
	e := newEnv(t)
	var ov *overlapStore
	s := e.scheduler("p1", func(ts taskStore) taskStore { ov = &overlapStore{taskStore: ts, met: make(chan struct{})}; return ov })
	spec := everySecond("it.overlap")
	spec.Catchup = schedule.CatchupNone
	now, missed, c := e.handledThrough("ov", spec, 100*time.Second, 60*time.Second)
	// a dead leader materialized every third missed tick
	var subs []redisstore.Submit
	for i := 0; i < len(missed); i += 3 {
		subs = append(subs, redisstore.Submit{Task: c.Task("ov", missed[i])})
	}
	if _, err := e.store.Schedule(t.Context(), subs); err != nil {
		t.Fatal(err)
	}
	e.pass(s, now)
	if n := ov.max.Load(); n < 2 {
		t.Errorf("at most %d lookup in flight, want them concurrent", n)
	}
	if got, want := counter(t, s.m.Ticks, outcomeSkipped), len(missed)-len(subs); got != want {
		t.Errorf("skipped %d, want %d", got, want)
	}
	st, _ := e.state("ov")
	var recent []int64
	for i := 0; i < len(missed); i += 3 {
		recent = append(recent, missed[i].UnixMilli())
	}
	// the recent ticks up to now are the latest materialized missed ones
	var past []int64
	for _, r := range st.Recent {
		if r <= now.UnixMilli() {
			past = append(past, r)
		}
	}
	if len(past) == 0 || !slices.Equal(past, recent[len(recent)-len(past):]) {
		t.Errorf("recent ticks %v, want the latest of the materialized missed ones %v", past, recent)
	}
}

// overlapStore records how many Gets run at once; the first Get waits (up
// to 5 s) for a second one to start, so that sequential lookups show as 1.
type overlapStore struct {
	taskStore
	in, max atomic.Int64
	first   atomic.Bool
	once    sync.Once
	met     chan struct{}
}

func (o *overlapStore) Get(ctx context.Context, id string) (*task.Task, error) {
	n := o.in.Add(1)
	defer o.in.Add(-1)
	for m := o.max.Load(); n > m && !o.max.CompareAndSwap(m, n); m = o.max.Load() {
	}
	if n >= 2 {
		o.once.Do(func() { close(o.met) })
	} else if o.first.CompareAndSwap(false, true) {
		select {
		case <-o.met:
		case <-time.After(5 * time.Second):
		}
	}
	return o.taskStore.Get(ctx, id)
}

// failingStore fails every Schedule call while fail is set.
type failingStore struct {
	taskStore
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *failingStore) Schedule(ctx context.Context, subs []redisstore.Submit) ([]redisstore.Result, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return nil, errors.New("redis down")
	}
	return f.taskStore.Schedule(ctx, subs)
}

func TestFailuresWriteNoState(t *testing.T) {
	e := newEnv(t)
	var fs *failingStore
	s := e.scheduler("p1", func(ts taskStore) taskStore { fs = &failingStore{taskStore: ts}; return fs })
	sch := e.put("f", everySecond("it.f"))

	// A fenced pass (not the leader any more) writes no state.
	if err := s.pass(t.Context(), sch.UpdatedAt, e.closed()); !errors.Is(err, errFenced) {
		t.Fatalf("pass under a failing fence: %v, want errFenced", err)
	}
	if _, ok := e.state("f"); ok {
		t.Error("a fenced pass wrote the state")
	}
	// A Redis error writes no state either; the next pass does it all.
	fs.fail.Store(true)
	if err := s.pass(t.Context(), sch.UpdatedAt, e.open()); err == nil {
		t.Fatal("pass with Redis down succeeded")
	}
	if _, ok := e.state("f"); ok {
		t.Error("a pass whose materialization failed wrote the state")
	}
	if n := counter(t, s.m.Errors, opSchedule); n != 1 {
		t.Errorf("materialize errors %d, want 1", n)
	}
	fs.fail.Store(false)
	e.pass(s, sch.UpdatedAt)
	if st, ok := e.state("f"); !ok || len(st.Pending) != 3 {
		t.Errorf("state after recovery %+v (ok %v)", st, ok)
	}
}

// running is a scheduler's Run in a goroutine.
type running struct {
	s      *Scheduler
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, s *Scheduler) *running {
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{s: s, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() { r.cancel(); <-r.done }

func TestOneLeaderFencingAndHandover(t *testing.T) {
	e := newEnv(t)
	a := start(t, e.scheduler("a", nil))
	b := start(t, e.scheduler("b", nil))
	e.put("lead", everySecond("it.lead"))

	leader := func() (*running, *running, int) {
		n := 0
		var l, f *running
		for _, r := range []*running{a, b} {
			if r.s.Leading() {
				n++
				l = r
			} else {
				f = r
			}
		}
		return l, f, n
	}
	testenv.WaitFor(t, 10*time.Second, "a scheduler leads", func() bool { _, _, n := leader(); return n == 1 })
	l, f, _ := leader()
	testenv.WaitFor(t, 10*time.Second, "the leader materializes ticks", func() bool {
		st, ok := e.state("lead")
		return ok && len(st.Pending) > 0
	})
	// Never two leaders: sample while the leader works.
	for range 50 {
		if _, _, n := leader(); n > 1 {
			t.Fatal("two schedulers lead at once")
		}
		time.Sleep(10 * time.Millisecond) // sampling interval
	}
	if counter(t, f.s.m.Ticks, outcomeMaterialized) != 0 {
		t.Error("the follower materialized ticks")
	}

	// Fencing: the leader's key disappears (as when its lease expired on
	// the server); its next state write fails the fence and it stops
	// leading under that key.
	pfx := schedule.ElectionPrefix(e.ns)
	resp, err := e.ec.Get(t.Context(), pfx+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatal(resp, err)
	}
	leaderKey := string(resp.Kvs[0].Key)
	if _, err := e.ec.Delete(t.Context(), leaderKey); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the old leader is fenced", func() bool {
		return counter(t, l.s.m.Errors, opFenced) >= 1
	})
	testenv.WaitFor(t, 10*time.Second, "a scheduler leads again", func() bool { _, _, n := leader(); return n == 1 })

	// Graceful stop: the leader resigns, the other takes over without
	// waiting for a lease to expire, and goes on materializing.
	l, f, _ = leader()
	l.stop()
	testenv.WaitFor(t, 10*time.Second, "the other scheduler takes over", func() bool { return f.s.Leading() })
	before, _ := e.state("lead")
	testenv.WaitFor(t, 10*time.Second, "the new leader materializes ticks", func() bool {
		st, _ := e.state("lead")
		return st.Through > before.Through
	})
	if l.s.Leading() {
		t.Error("the stopped scheduler still says it leads")
	}
}

// TestSessionLossCampaignsAgain: the leader's lease is revoked (as when
// etcd expired it): the scheduler stops leading, makes a new session and
// leads again under a new key.
func TestSessionLossCampaignsAgain(t *testing.T) {
	e := newEnv(t)
	s := e.scheduler("solo", nil)
	start(t, s)
	e.put("sl", everySecond("it.sl"))
	pfx := schedule.ElectionPrefix(e.ns) + "/"
	leaderKey := func() (string, clientv3.LeaseID) {
		resp, err := e.ec.Get(t.Context(), pfx, clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			return "", 0
		}
		return string(resp.Kvs[0].Key), clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	testenv.WaitFor(t, 10*time.Second, "the scheduler leads", func() bool { k, _ := leaderKey(); return s.Leading() && k != "" })
	key, lease := leaderKey()
	if _, err := e.ec.Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "the scheduler leads again under a new lease", func() bool {
		k, l := leaderKey()
		return s.Leading() && k != "" && k != key && l != lease
	})
	before, _ := e.state("sl")
	testenv.WaitFor(t, 10*time.Second, "it materializes again", func() bool {
		st, _ := e.state("sl")
		return st.Through > before.Through
	})
}
