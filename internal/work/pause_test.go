package work

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// startStoppable is startApp with a stop that ends Run and waits for it.
func startStoppable(t *testing.T, vars map[string]string) (*App, func()) {
	t.Helper()
	var cfg Config
	b := config.NewBinder("work")
	cfg.Bind(b)
	if err := b.Parse(nil, func(k string) string { return vars[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Load(); err != nil {
		t.Fatal(err)
	}
	app, err := New(t.Context(), cfg, cfg.Logger("work"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("work app: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	testenv.WaitFor(t, 10*time.Second, "work app ready", func() bool {
		resp, err := httpGet("http://" + app.Addr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return app, stop
}

// scrape reads the app's /metrics.
func scrape(t *testing.T, a *App) string {
	t.Helper()
	resp, err := httpGet("http://" + a.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A work process with etcd follows the pause state live: tasks of a type
// paused through etcd are parked without being delivered or using an
// attempt while other types run; resumed (and unparked, as the daemon's
// resume does), each is delivered once, at attempt 1. The process is in
// the registry (ready, at its admin address) until it stops.
func TestPauseLiveAndRegistry(t *testing.T) {
	e := newEnv(t)
	etcd := testenv.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := t.Context()
	if _, err := pause.Pause(ctx, cli, e.NS, "report"); err != nil {
		t.Fatal(err)
	}
	s := newSink(t)
	v := e.vars(s.srv.URL + "/w1")
	v["DQ_ETCD_ENDPOINTS"] = etcd.Endpoints[0]
	app, stop := startStoppable(t, v)
	testenv.WaitFor(t, 10*time.Second, "pause state seen", func() bool { return app.pause.Paused("report") })
	testenv.WaitFor(t, 5*time.Second, "paused types gauge", func() bool {
		return strings.Contains(scrape(t, app), "\ndelayq_paused_types 1\n")
	})

	// registered: ready, at the bound admin address
	var me registry.Proc
	testenv.WaitFor(t, 10*time.Second, "registered ready", func() bool {
		ps, err := registry.List(ctx, cli, e.NS)
		if err != nil || len(ps) != 1 {
			return false
		}
		me = ps[0]
		return me.Ready
	})
	if me.Kind != registry.KindWork || me.Addr != app.Addr() || me.ID == "" || me.Version == "" || me.StartedAt.IsZero() {
		t.Fatalf("registered as %+v (admin at %s)", me, app.Addr())
	}

	e.Firer.Start(t)
	want := map[string]int{}
	var reports, mails []string
	for i := range 10 {
		r, m := "report-"+itoa(i), "mail-"+itoa(i)
		reports, mails = append(reports, r), append(mails, m)
		want[r], want[m] = 1, 1
		worktest.Schedule(t, e.Store, jsonTask(r, "report"), jsonTask(m, "mail"))
	}
	e.WaitState(t, 15*time.Second, task.StateSucceeded, mails...)
	e.WaitState(t, 15*time.Second, task.StatePaused, reports...)
	for _, id := range reports {
		if n := s.count(id); n != 0 {
			t.Fatalf("%s of a paused type delivered %d times", id, n)
		}
	}
	if !strings.Contains(scrape(t, app), `delayq_work_parked_total{type="report"} 10`) {
		t.Error("delayq_work_parked_total{type=\"report\"} is not 10")
	}

	if changed, err := pause.Resume(ctx, cli, e.NS, "report"); err != nil || !changed {
		t.Fatalf("Resume: %v %v", changed, err)
	}
	testenv.WaitFor(t, 5*time.Second, "resume seen", func() bool { return !app.pause.Paused("report") })
	if _, err := e.Store.Unpark(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, 15*time.Second, task.StateSucceeded, reports...)
	if wrong, _ := s.check(want); len(wrong) > 0 {
		t.Fatalf("not exactly once: %v", wrong)
	}
	for _, id := range reports {
		if c := s.get(id); c[0].attempt != 1 {
			t.Errorf("%s delivered as attempt %d, want 1", id, c[0].attempt)
		}
	}
	if !strings.Contains(scrape(t, app), "\ndelayq_paused_types 0\n") {
		t.Error("delayq_paused_types is not 0 after the resume")
	}

	// stopping unregisters
	stop()
	if ps, err := registry.List(ctx, cli, e.NS); err != nil || len(ps) != 0 {
		t.Fatalf("registry after stop: %v %v", ps, err)
	}
}
