package ratelimit

import (
	"container/heap"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/testenv"
)

// The flow tests simulate three work processes: three goroutines, each
// with its own Redis client, its own Limiter and its own etcd client and
// Rules watcher. An in-memory due queue stands in for the Redis due set and
// Kafka between them: a deferred item waits in it until its NotBefore. (The
// tests with three real work processes come with the worker wiring.)

// fleet is the shared infrastructure plus one Limiter and watcher per
// simulated worker.
type fleet struct {
	redis *testenv.Redis
	etcd  *testenv.Etcd
	ns    string
	admin *Rules // the control side (what the daemon API uses)
	rules []*Rules
	lims  []*Limiter
	rdbs  []*redis.Client
	hooks []*countHook
}

func newFleet(t *testing.T, workers int, o Options) *fleet {
	t.Helper()
	f := &fleet{redis: testenv.StartRedis(t), etcd: testenv.StartEtcd(t), ns: testNS(t)}
	f.admin = newRules(t, f.etcd.Client(t), f.ns)
	for range workers {
		rdb := f.redis.Client(t)
		hook := new(countHook)
		rdb.AddHook(hook)
		r := newRules(t, f.etcd.Client(t), f.ns)
		runRules(t, r)
		f.rdbs = append(f.rdbs, rdb)
		f.hooks = append(f.hooks, hook)
		f.rules = append(f.rules, r)
		f.lims = append(f.lims, newLimiter(t, rdb, f.ns, r, o))
	}
	return f
}

// setRule stores a rule and waits until every worker's watcher has it; it
// returns how long each took.
func (f *fleet) setRule(t *testing.T, typ string, rule Rule) []time.Duration {
	t.Helper()
	start := time.Now()
	if err := f.admin.Put(t.Context(), typ, rule); err != nil {
		t.Fatal(err)
	}
	return f.waitRule(t, typ, &rule, start)
}

// waitRule waits until every watcher shows want (nil: no rule) for typ and
// returns each one's delay since start.
func (f *fleet) waitRule(t *testing.T, typ string, want *Rule, start time.Time) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, len(f.rules))
	pending := len(f.rules)
	tick := time.NewTicker(time.Millisecond) // finer than WaitFor's 10 ms: this measures
	defer tick.Stop()
	for pending > 0 {
		for i, r := range f.rules {
			if lat[i] != 0 {
				continue
			}
			got, ok := r.Rule(typ)
			if want == nil && !ok || want != nil && ok && reflect.DeepEqual(got, *want) {
				lat[i] = time.Since(start)
				pending--
			}
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("after 5s, watchers still without the change of %s: latencies %v", typ, lat)
		}
		<-tick.C
	}
	return lat
}

// dueQueue holds items until their NotBefore, like the Redis due set.
type dueQueue struct {
	mu       sync.Mutex
	h        queueHeap
	seq      int
	inflight int // popped, not yet decided
}

type queued struct {
	it  Item
	at  time.Time
	seq int
}

type queueHeap []queued

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h queueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *queueHeap) Push(x any)   { *h = append(*h, x.(queued)) }
func (h *queueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (q *dueQueue) push(it Item, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	heap.Push(&q.h, queued{it, at, q.seq})
}

// pop takes up to limit items due at now.
func (q *dueQueue) pop(now time.Time, limit int) []Item {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Item
	for len(out) < limit && q.h.Len() > 0 && !q.h[0].at.After(now) {
		out = append(out, heap.Pop(&q.h).(queued).it)
	}
	q.inflight += len(out)
	return out
}

func (q *dueQueue) done(n int) {
	q.mu.Lock()
	q.inflight -= n
	q.mu.Unlock()
}

func (q *dueQueue) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.h.Len() == 0 {
		return time.Time{}, false
	}
	return q.h[0].at, true
}

// simWorker fetches due items in batches, asks its Limiter, hands admitted
// items to run and puts deferred ones back due at NotBefore.
type simWorker struct {
	lim      *Limiter
	q        *dueQueue
	batch    int
	clock    func() time.Time     // the worker's idea of now (Redis' clock plus the test shift)
	capacity func() int           // how many items it can take now; nil: batch
	run      func(Item, Decision) // an admitted item
}

func (w *simWorker) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		n := w.batch
		if w.capacity != nil {
			n = min(n, w.capacity())
		}
		var batch []Item
		if n > 0 {
			batch = w.q.pop(w.clock(), n)
		}
		if len(batch) == 0 {
			// idle like a poller: until the next due item, at most 2 ms
			wait := 2 * time.Millisecond
			if at, ok := w.q.next(); ok {
				wait = min(wait, max(at.Sub(w.clock()), 0))
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			continue
		}
		ds, err := w.lim.Admit(ctx, batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, d := range ds {
			if d.Run {
				w.run(batch[i], d)
			} else {
				w.q.push(batch[i], d.NotBefore)
			}
		}
		w.q.done(len(batch))
	}
	return nil
}

// runWorkers runs one simWorker per Limiter until stop is called.
func runWorkers(t *testing.T, f *fleet, mk func(i int, l *Limiter) *simWorker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	g, gctx := errgroup.WithContext(ctx)
	for i, l := range f.lims {
		w := mk(i, l)
		g.Go(func() error { return w.loop(gctx) })
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := g.Wait(); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// admissions records what ran, for the quota checks.
type admissions struct {
	mu       sync.Mutex
	byID     map[string]int
	byWindow map[int64]int
	total    atomic.Int64
}

func newAdmissions() *admissions {
	return &admissions{byID: map[string]int{}, byWindow: map[int64]int{}}
}

func (a *admissions) add(it Item, d Decision) {
	a.mu.Lock()
	a.byID[it.ID]++
	a.byWindow[d.window]++
	a.mu.Unlock()
	a.total.Add(1)
}

// check asserts that every window admitted exactly quota (the last one the
// rest), windows follow each other, and every item ran exactly once.
func (a *admissions) check(t *testing.T, total, quota int, win time.Duration) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.byID {
		if n != 1 {
			t.Errorf("%s admitted %d times", id, n)
		}
	}
	if len(a.byID) != total {
		t.Errorf("%d distinct items admitted, want %d", len(a.byID), total)
	}
	starts := slices.Sorted(func(yield func(int64) bool) {
		for s := range a.byWindow {
			if !yield(s) {
				return
			}
		}
	})
	want := (total + quota - 1) / quota
	var line []string
	for i, s := range starts {
		n := a.byWindow[s]
		line = append(line, fmt.Sprintf("%d", n))
		exp := quota
		if i == want-1 && total%quota != 0 {
			exp = total % quota
		}
		if n != exp {
			t.Errorf("window %d (start %d) admitted %d, want %d", i, s, n, exp)
		}
		if i > 0 && s-starts[i-1] != win.Milliseconds() {
			t.Errorf("window %d starts %d ms after the previous one, want %v (a window was skipped)", i, s-starts[i-1], win)
		}
	}
	if len(starts) != want {
		t.Errorf("admissions spread over %d windows, want %d", len(starts), want)
	}
	t.Logf("per window: %v (quota %d per %v, %d items)", line, quota, win, total)
}

// The issue's figures — 3,000 items of one type due at once, 600 per
// 10-second window, three workers — on a virtual clock: the workers and
// the scripts run on Redis' clock plus a shift that the test moves to the
// next window once the current one is done, so five windows take well
// under a second instead of 50 s. Everything else is real.
func TestQuotaIssueFigures(t *testing.T) {
	const total, quota, win = 3000, 600, 10 * time.Second
	f := newFleet(t, 3, Options{})
	f.setRule(t, "report", Rule{WindowQuota: &WindowQuota{Limit: quota, Window: dur(win)}})
	q := &dueQueue{}
	for _, it := range items("report", total, 0) {
		q.push(it, time.Time{})
	}
	var shift atomic.Int64
	shift.Store(alignShift(t, f.rdbs[0], win, f.lims...))
	clock := func() time.Time { return time.Now().Add(time.Duration(shift.Load()) * time.Millisecond) }
	adm := newAdmissions()
	stop := runWorkers(t, f, func(_ int, l *Limiter) *simWorker {
		return &simWorker{lim: l, q: q, batch: 100, clock: clock, run: adm.add}
	})
	for round := 0; adm.total.Load() < total; round++ {
		if round > 10 {
			t.Fatalf("only %d admitted after %d windows", adm.total.Load(), round)
		}
		// the window is done when nothing is due or being decided
		testenv.WaitFor(t, 5*time.Second, "the workers to finish a window", func() bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.inflight == 0 && (q.h.Len() == 0 || q.h[0].at.After(clock()))
		})
		if adm.total.Load() == total {
			break
		}
		// jump to the start of the next window (the earliest NotBefore)
		q.mu.Lock()
		next := q.h[0].at.UnixMilli()
		s := next - redisMillis(t, f.rdbs[0]) + 1
		shift.Store(s)
		for _, l := range f.lims {
			shiftOf(t, l).Store(s)
		}
		q.mu.Unlock()
	}
	stop()
	adm.check(t, total, quota, win)
}

// The same on the real clock with short windows (120 per 1 s window, 600
// items): windows roll over and counters expire for real.
func TestQuotaThreeWorkersRealClock(t *testing.T) {
	const total, quota, win = 600, 120, time.Second
	f := newFleet(t, 3, Options{})
	f.setRule(t, "report", Rule{WindowQuota: &WindowQuota{Limit: quota, Window: dur(win)}})
	q := &dueQueue{}
	for _, it := range items("report", total, 0) {
		q.push(it, time.Time{})
	}
	adm := newAdmissions()
	stop := runWorkers(t, f, func(_ int, l *Limiter) *simWorker {
		return &simWorker{lim: l, q: q, batch: 50, clock: time.Now, run: adm.add}
	})
	testenv.WaitFor(t, 10*time.Second, "all items admitted", func() bool { return adm.total.Load() == total })
	stop()
	adm.check(t, total, quota, win)
	// expired windows leave nothing behind but the current counter
	keys, err := f.rdbs[0].Keys(t.Context(), "dq:{"+f.ns+":rl:*").Result()
	if err != nil || len(keys) > 1 {
		t.Fatalf("keys left: %v %v", keys, err)
	}
}

// Token bucket at 200/s, burst 50, for 5 s with three workers and ample
// demand: after the burst, the admitted rate stays within 5% of 200/s.
func TestTokenBucketRate(t *testing.T) {
	const rate, burst, run = 200, 50, 5 * time.Second
	f := newFleet(t, 3, Options{})
	f.setRule(t, "api", Rule{TokenBucket: &TokenBucket{Rate: rate, Burst: burst}})
	q := &dueQueue{}
	for _, it := range items("api", 2000, 0) {
		q.push(it, time.Time{})
	}
	var mu sync.Mutex
	var at []time.Time
	start := time.Now()
	stop := runWorkers(t, f, func(_ int, l *Limiter) *simWorker {
		return &simWorker{lim: l, q: q, batch: 20, clock: time.Now, run: func(Item, Decision) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}}
	})
	timer := time.NewTimer(run)
	<-timer.C
	stop()

	// measured from the first admission (the run may start late on a busy
	// machine); the bucket starts full
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	t0 := at[0]
	from, to := t0.Add(500*time.Millisecond), t0.Add(4500*time.Millisecond)
	if to.After(start.Add(run)) {
		t.Fatalf("first admission %v after the start: the run was too short to measure", t0.Sub(start))
	}
	first, steady := 0, 0
	for _, a := range at {
		switch {
		case a.Before(t0.Add(100 * time.Millisecond)):
			first++
		case !a.Before(from) && a.Before(to):
			steady++
		}
	}
	got := float64(steady) / to.Sub(from).Seconds()
	t.Logf("admitted %d in the first 100 ms (burst %d), %d in [0.5s,4.5s): %.1f/s (rate %d/s, %+.2f%%); %d in total",
		first, burst, steady, got, rate, 100*(got-rate)/rate, len(at))
	if got < rate*0.95 || got > rate*1.05 {
		t.Fatalf("steady rate %.1f/s, want within 5%% of %d/s", got, rate)
	}
	// at most the burst plus 100 ms of refill
	if first > burst+rate/10+2 {
		t.Fatalf("first 100 ms admitted %d, more than the burst %d plus %d refilled", first, burst, rate/10)
	}
}

// With a reserve, high-priority items keep flowing at the full rate while
// low-priority ones are held back once the bucket falls to the reserve.
func TestTokenBucketReserveFlow(t *testing.T) {
	const rate = 100
	f := newFleet(t, 3, Options{})
	f.setRule(t, "api", Rule{TokenBucket: &TokenBucket{Rate: rate, Burst: 20, Reserve: 10, MinPriority: 5}})
	q := &dueQueue{}
	for i := range 500 {
		q.push(Item{ID: fmt.Sprintf("hi-%d", i), Type: "api", Priority: 10}, time.Time{})
		q.push(Item{ID: fmt.Sprintf("lo-%d", i), Type: "api", Priority: 0}, time.Time{})
	}
	var hi, lo, hiAll, loAll atomic.Int64
	start := time.Now()
	steadyFrom := start.Add(300 * time.Millisecond)
	stop := runWorkers(t, f, func(_ int, l *Limiter) *simWorker {
		return &simWorker{lim: l, q: q, batch: 20, clock: time.Now, run: func(it Item, _ Decision) {
			steady := time.Now().After(steadyFrom)
			if it.Priority >= 5 {
				hiAll.Add(1)
				if steady {
					hi.Add(1)
				}
			} else {
				loAll.Add(1)
				if steady {
					lo.Add(1)
				}
			}
		}}
	})
	timer := time.NewTimer(2 * time.Second)
	<-timer.C
	stop()
	secs := time.Since(steadyFrom).Seconds()
	t.Logf("in total high %d low %d; after 300 ms: high %d (%.1f/s, rate %d/s), low %d", hiAll.Load(), loAll.Load(), hi.Load(), float64(hi.Load())/secs, rate, lo.Load())
	if float64(hi.Load()) < 0.9*rate*secs {
		t.Fatalf("high priority admitted at %.1f/s, want about %d/s", float64(hi.Load())/secs, rate)
	}
	if lo.Load() > max(2, hi.Load()/50) {
		t.Fatalf("low priority admitted %d times while high priority was waiting (reserve not kept)", lo.Load())
	}
}

// Concurrency limit 5, three workers with four handler goroutines each and
// slow handlers: never more than 5 run at once (counted in the handlers and
// sampled from Redis).
func TestConcurrencyThreeWorkers(t *testing.T) {
	const limit, total = 5, 60
	f := newFleet(t, 3, Options{ConcurrencyRetry: 10 * time.Millisecond})
	rule := Rule{Concurrency: &Concurrency{Limit: limit, SlotTTL: dur(10 * time.Second)}}
	f.setRule(t, "render", rule)
	q := &dueQueue{}
	for _, it := range items("render", total, 0) {
		q.push(it, time.Time{})
	}
	var running, maxRunning, handled, sampled, maxSampled atomic.Int64
	var handlers sync.WaitGroup
	ctx := t.Context()
	stop := runWorkers(t, f, func(i int, l *Limiter) *simWorker {
		var active atomic.Int64
		return &simWorker{lim: l, q: q, batch: 4, clock: time.Now,
			capacity: func() int { return 4 - int(active.Load()) },
			run: func(it Item, d Decision) {
				active.Add(1)
				handlers.Go(func() {
					defer active.Add(-1)
					n := running.Add(1)
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					time.Sleep(20 * time.Millisecond) // the handler's work
					running.Add(-1)
					if err := l.Done(ctx, it, d); err != nil {
						t.Errorf("done: %v", err)
					}
					handled.Add(1)
				})
			}}
	})
	sctx, cancel := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			u, err := f.lims[0].Usage(sctx, "render", rule)
			if err != nil {
				continue
			}
			sampled.Add(1)
			for m := maxSampled.Load(); u.Running > m && !maxSampled.CompareAndSwap(m, u.Running); m = maxSampled.Load() {
			}
		}
	})
	testenv.WaitFor(t, 10*time.Second, "all items handled", func() bool { return handled.Load() == total })
	cancel()
	sampler.Wait()
	stop()
	handlers.Wait()
	t.Logf("max running: %d in handlers, %d in %d Redis samples (limit %d)", maxRunning.Load(), maxSampled.Load(), sampled.Load(), limit)
	if maxRunning.Load() > limit || maxSampled.Load() > limit {
		t.Fatalf("more than %d ran at once", limit)
	}
	if maxRunning.Load() < limit {
		t.Fatalf("never reached %d running with 12 handlers wanting work: the test did not load the limit", limit)
	}
	// Done queues a slot's release, which goes out within releaseDelay (2
	// ms) on its own when no Admit takes it along: right after the last
	// Done, on a loaded machine, it may not have yet (a clean-clone CI run
	// saw 1 slot held here)
	testenv.WaitFor(t, 2*time.Second, "every slot released after every Done", func() bool {
		u, err := f.lims[1].Usage(ctx, "render", rule)
		return err == nil && u.Running == 0
	})
}

// A quota tightened through Rules (what the daemon's PUT
// /v1/limits/{type} calls, internal/daemon/limits.go) reaches all three
// workers within a second and holds at once across them; deleting it lifts
// the limit (and the type costs no Redis call any more).
func TestLiveChange(t *testing.T) {
	f := newFleet(t, 3, Options{})
	put := func(body string) time.Time {
		t.Helper()
		start := time.Now()
		rule, err := DecodeRule(strings.NewReader(body), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.admin.Put(t.Context(), "export", rule); err != nil {
			t.Fatal(err)
		}
		return start
	}
	admitAll := func(n int) int64 {
		var ran atomic.Int64
		var wg sync.WaitGroup
		for i, l := range f.lims {
			wg.Go(func() {
				batch := items(fmt.Sprintf("export-w%d", i), n, 0)
				for k := range batch {
					batch[k].Type = "export"
				}
				ds, err := l.Admit(t.Context(), batch)
				if err != nil {
					t.Error(err)
				}
				ran.Add(int64(countRun(ds)))
			})
		}
		wg.Wait()
		return ran.Load()
	}
	alignShift(t, f.rdbs[0], time.Hour, f.lims...) // no window boundary during the test

	loose := Rule{WindowQuota: &WindowQuota{Limit: 1000, Window: dur(time.Hour)}}
	f.waitRule(t, "export", &loose, put(`{"window_quota":{"limit":1000,"window":"1h"}}`))
	if ran := admitAll(10); ran != 30 {
		t.Fatalf("loose quota: %d ran, want 30", ran)
	}

	tight := Rule{WindowQuota: &WindowQuota{Limit: 40, Window: dur(time.Hour)}}
	lat := f.waitRule(t, "export", &tight, put(`{"window_quota":{"limit":40,"window":"1h"}}`))
	t.Logf("tightened quota seen by the 3 watchers after %v (from the PUT request)", lat)
	for i, d := range lat {
		if d > time.Second {
			t.Errorf("watcher %d saw the change after %v, want within 1s", i, d)
		}
	}
	if ran := admitAll(10); ran != 10 {
		t.Fatalf("after tightening to 40 with 30 used: %d ran, want 10", ran)
	}

	start := time.Now()
	if _, err := f.admin.Delete(t.Context(), "export"); err != nil {
		t.Fatal(err)
	}
	lat = f.waitRule(t, "export", nil, start)
	t.Logf("deletion seen by the 3 watchers after %v", lat)
	for i, d := range lat {
		if d > time.Second {
			t.Errorf("watcher %d saw the deletion after %v, want within 1s", i, d)
		}
	}
	var before int64
	for _, h := range f.hooks {
		before += h.roundTrips()
	}
	if ran := admitAll(100); ran != 300 {
		t.Fatalf("after delete: %d ran, want all 300", ran)
	}
	var after int64
	for _, h := range f.hooks {
		after += h.roundTrips()
	}
	if after != before {
		t.Fatalf("a type without a rule made %d Redis calls", after-before)
	}
}
