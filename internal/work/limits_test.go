package work

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// Three work processes share one window quota through Redis: with a quota
// of 60 per 2-second window for one type and 180 tasks of it due at once,
// each window runs at most 60 across all three workers (the rest is
// deferred to the next window, not failed), all 180 run exactly once, and
// 30 tasks of a type without a rule, due at the same moment, run at once.
//
// Windows are aligned on Redis' clock (the same machine's clock as the
// sink's). The tasks are due 150ms after a window starts and deferred tasks
// are due at the next window's start, so every admission happens early in
// its window and the sink's receive time tells the window apart with a
// margin of more than a second.
func TestRateLimitWindowQuotaAcrossWorkers(t *testing.T) {
	const (
		window  = 2 * time.Second
		quota   = 60
		limited = 180
		free    = 30
	)
	e := newEnv(t)
	etcd := testenv.StartEtcd(t)
	rules, err := ratelimit.NewRules(etcd.Client(t), e.NS, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.Put(t.Context(), "limited", ratelimit.Rule{
		WindowQuota: &ratelimit.WindowQuota{Limit: quota, Window: ratelimit.Duration(window)}}); err != nil {
		t.Fatal(err)
	}
	s := newSink(t)
	e.Firer.Start(t)
	var apps []*App
	for i := range 3 {
		v := e.vars(s.srv.URL + fmt.Sprintf("/w%d", i))
		v["DQ_ETCD_ENDPOINTS"] = etcd.Endpoints[0]
		apps = append(apps, startApp(t, v))
	}
	testenv.WaitFor(t, 10*time.Second, "every worker sees the rule", func() bool {
		for _, a := range apps {
			if _, ok := a.limits.rules.Rule("limited"); !ok {
				return false
			}
		}
		return true
	})

	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	w0 := now.Truncate(window).Add(window) // next window start by Redis' clock
	due := w0.Add(150 * time.Millisecond)
	want := map[string]int{}
	var tasks []*task.Task
	for i := range limited {
		tk := jsonTask(fmt.Sprintf("lim-%03d", i), "limited")
		tk.DueAt = due
		tasks = append(tasks, tk)
		want[tk.ID] = 1
	}
	for i := range free {
		tk := jsonTask(fmt.Sprintf("free-%02d", i), "free")
		tk.DueAt = due
		tasks = append(tasks, tk)
		want[tk.ID] = 1
	}
	worktest.Schedule(t, e.Store, tasks...)

	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	e.WaitState(t, 15*time.Second, task.StateSucceeded, ids...)

	perWindow := map[int]int{} // window index from w0 -> limited calls received in it
	var freeLate []string
	s.mu.Lock()
	for id, cs := range s.calls {
		for _, c := range cs {
			k := int(c.at.Sub(w0) / window)
			if c.at.Before(w0) {
				k = -1
			}
			switch {
			case len(id) > 4 && id[:4] == "lim-":
				perWindow[k]++
			case c.at.Sub(due) > time.Second:
				freeLate = append(freeLate, fmt.Sprintf("%s after %v", id, c.at.Sub(due)))
			}
		}
	}
	s.mu.Unlock()
	wrong, byPath := s.check(want)
	if len(wrong) > 0 {
		t.Fatalf("not exactly once: %v", wrong)
	}
	var ks []int
	for k := range perWindow {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var counts []string
	for _, k := range ks {
		counts = append(counts, fmt.Sprintf("window %d: %d", k, perWindow[k]))
	}
	t.Logf("limited tasks per %v window: %v; calls per worker %v", window, counts, byPath)
	for _, k := range ks {
		if k < 0 || perWindow[k] > quota {
			t.Errorf("window %d ran %d tasks of the limited type, quota %d", k, perWindow[k], quota)
		}
	}
	if len(ks) < limited/quota {
		t.Errorf("%d tasks ran in %d windows: the quota of %d was not enforced", limited, len(ks), quota)
	}
	if len(freeLate) > 0 {
		t.Errorf("the unlimited type waited: %v", freeLate)
	}
	// deferring is not an attempt
	for _, id := range ids {
		tk, err := e.Store.Get(t.Context(), id)
		if err != nil || tk.Attempt != 1 {
			t.Fatalf("%s: attempt %d (%v); a deferral must not use an attempt", id, tk.Attempt, err)
		}
	}
	deferred := 0.0
	for _, a := range apps {
		deferred += metricValue(t, a, "delayq_work_handled_total", `outcome="deferred"`)
	}
	t.Logf("deferrals stored: %v", deferred)
	if deferred < limited-quota {
		t.Errorf("%v deferrals stored, want at least %d", deferred, limited-quota)
	}
}

// metricValue sums the samples of a metric whose labels contain match, read
// from an app's /metrics.
func metricValue(t *testing.T, a *App, name, match string) float64 {
	t.Helper()
	resp, err := httpGet("http://" + a.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// With etcd unreachable, the work process starts, stays ready and runs
// every task unlimited (the rules snapshot is empty until etcd answers).
func TestEtcdUnreachableRunsUnlimited(t *testing.T) {
	e := newEnv(t)
	s := newSink(t)
	e.Firer.Start(t)
	v := e.vars(s.srv.URL + "/w")
	v["DQ_ETCD_ENDPOINTS"] = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens
	v["DQ_LOG_LEVEL"] = "error"
	app := startApp(t, v)
	want := map[string]int{}
	var tasks []*task.Task
	var ids []string
	for i := range 50 {
		tk := jsonTask(fmt.Sprintf("x-%d", i), "limited")
		tasks = append(tasks, tk)
		ids = append(ids, tk.ID)
		want[tk.ID] = 1
	}
	worktest.Schedule(t, e.Store, tasks...)
	e.WaitState(t, 10*time.Second, task.StateSucceeded, ids...)
	if wrong, _ := s.check(want); len(wrong) > 0 {
		t.Fatalf("not exactly once: %v", wrong)
	}
	if n := metricValue(t, app, "delayq_work_handled_total", `outcome="deferred"`); n != 0 {
		t.Fatalf("%v tasks deferred without rules", n)
	}
}
