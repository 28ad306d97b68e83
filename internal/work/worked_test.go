package work

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/internal/worked"
)

// sinceRE is RFC 3339 with milliseconds, in UTC.
var sinceRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// workConfig is the configuration vars give (as runUnready reads it).
func workConfig(t *testing.T, vars map[string]string) Config {
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
	return cfg
}

// declaredGauge is the app's delayq_work_topics_declared.
func declaredGauge(t *testing.T, a *App) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, a), "\n") {
		if v, ok := strings.CutPrefix(line, "delayq_work_topics_declared "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return f
		}
	}
	t.Fatal("/metrics lacks delayq_work_topics_declared")
	return 0
}

// A work process with etcd declares every topic it consumes, before it
// runs the first task, with its group, process id and the time; a second
// start leaves the first declaration as it is.
func TestWorkDeclaresTopics(t *testing.T) {
	e := newEnv(t)
	etcd := testenv.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := t.Context()

	// the sink notes whether dq.tasks was declared when the first task ran
	s := newSink(t)
	var firstSawKey atomic.Int32 // 0: no call yet, 1: declared, 2: not declared
	s.setRespond(func(_ call, _ http.ResponseWriter, r *http.Request) {
		if firstSawKey.Load() != 0 {
			return
		}
		resp, err := cli.Get(r.Context(), worked.Key(e.NS, task.DefaultTopic))
		switch {
		case err == nil && len(resp.Kvs) == 1:
			firstSawKey.CompareAndSwap(0, 1)
		default:
			firstSawKey.CompareAndSwap(0, 2)
		}
	})
	// a task already in Kafka when the process starts
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, jsonTask("early-1", "t"))

	v := e.vars(s.srv.URL + "/w1")
	v["DQ_ETCD_ENDPOINTS"] = etcd.Endpoints[0]
	v["DQ_TOPICS"] = task.DefaultTopic + ",work.extra"
	v["DQ_KAFKA_AUTO_CREATE"] = "true"
	before := time.Now().Add(-time.Second)
	a1, stop1 := startStoppable(t, v)
	e.WaitState(t, 20*time.Second, task.StateSucceeded, "early-1")
	if got := firstSawKey.Load(); got != 1 {
		t.Fatalf("the first task ran before its topic was declared (%d)", got)
	}

	topics, err := worked.List(ctx, cli, e.NS)
	if err != nil || len(topics) != 2 || topics[0].Topic != task.DefaultTopic || topics[1].Topic != "work.extra" {
		t.Fatalf("worked topics: %+v %v", topics, err)
	}
	for _, wt := range topics {
		if wt.Group != e.Group || wt.By != a1.id || wt.By == "" || wt.Since.Before(before) || wt.Since.After(time.Now()) {
			t.Errorf("declared %+v, want group %s by %s since the start", wt, e.Group, a1.id)
		}
	}
	raw, err := cli.Get(ctx, worked.Key(e.NS, task.DefaultTopic))
	if err != nil || len(raw.Kvs) != 1 || raw.Kvs[0].Lease != 0 {
		t.Fatalf("stored key: %+v %v (want one, without a lease)", raw, err)
	}
	if s := string(raw.Kvs[0].Value); !sinceRE.MatchString(regexp.MustCompile(`"since":"([^"]*)"`).FindStringSubmatch(s)[1]) {
		t.Fatalf("stored value %s: since not RFC 3339 ms UTC", s)
	}
	firstRev := raw.Kvs[0].ModRevision
	if g := declaredGauge(t, a1); g != 2 {
		t.Errorf("delayq_work_topics_declared %v, want 2", g)
	}

	// stopped: the declaration stays; started again: it is kept as it was
	stop1()
	if topics, err := worked.List(ctx, cli, e.NS); err != nil || len(topics) != 2 {
		t.Fatalf("worked topics after the process stopped: %+v %v", topics, err)
	}
	a2, _ := startStoppable(t, v)
	if a2.id == a1.id {
		t.Fatal("both processes have the same id")
	}
	again, err := worked.List(ctx, cli, e.NS)
	if err != nil || len(again) != 2 {
		t.Fatalf("worked topics after a second start: %+v %v", again, err)
	}
	for i := range again {
		if again[i] != topics[i] {
			t.Errorf("second start changed %+v into %+v", topics[i], again[i])
		}
	}
	if raw, err := cli.Get(ctx, worked.Key(e.NS, task.DefaultTopic)); err != nil || raw.Kvs[0].ModRevision != firstRev {
		t.Fatalf("the second start rewrote the key: %+v %v", raw, err)
	}
	if g := declaredGauge(t, a2); g != 2 {
		t.Errorf("second process: delayq_work_topics_declared %v, want 2", g)
	}
}

// etcd answers but refuses the declaration (no permission on
// /<ns>/worked/): the process does not start, and says why.
func TestWorkStartFailsWhenDeclarationRefused(t *testing.T) {
	e := newEnv(t)
	ns := e.NS
	etcd := testenv.StartEtcdWith(t, testenv.EtcdOptions{RootPassword: "rootpw", Users: []testenv.EtcdUser{{
		Name: "worker", Password: "workerpw",
		Prefixes: []string{"/" + ns + "/limits/", "/" + ns + "/paused/", "/" + ns + "/procs/"},
	}}})
	s := newSink(t)
	v := e.vars(s.srv.URL + "/w1")
	v["DQ_ETCD_ENDPOINTS"] = etcd.Endpoints[0]
	v["DQ_ETCD_USERNAME"], v["DQ_ETCD_PASSWORD"] = "worker", "workerpw"
	v["DQ_LOG_LEVEL"] = "error"
	cfg := workConfig(t, v)
	app, err := New(t.Context(), cfg, cfg.Logger("work"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(t.Context()) }()
	select {
	case err = <-done:
	case <-time.After(2 * declareStart):
		t.Fatal("the work process ran without declaring its topics")
	}
	if err == nil || !strings.Contains(err.Error(), "declare worked topics "+task.DefaultTopic) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Run: %v, want the refused declaration", err)
	}
}

// Without etcd (-etcd-endpoints ""), New warns once that the topics
// cannot be declared.
func TestWorkWithoutEtcdWarns(t *testing.T) {
	e := newEnv(t)
	s := newSink(t)
	cfg := workConfig(t, e.vars(s.srv.URL+"/w1"))
	cfg.EtcdEndpoints = nil
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app, err := New(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // nothing to run: release what New took
	if err := app.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if n := strings.Count(out, "cannot be declared worked"); n != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, task.DefaultTopic) {
		t.Fatalf("log (%d warnings about the topics):\n%s", n, out)
	}
	if app.declared.Load() != 0 {
		t.Fatal("topics counted declared without etcd")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// etcd down at start (no endpoint accepts a connection): the process
// runs, as it does without etcd, and declares its topics once etcd is
// back.
func TestWorkDeclaresWhenEtcdComesBack(t *testing.T) {
	e := newEnv(t)
	etcd := testenv.StartEtcd(t)
	cli := etcd.Client(t)
	etcd.Stop(t)
	s := newSink(t)
	e.Firer.Start(t)
	v := e.vars(s.srv.URL + "/w1")
	v["DQ_ETCD_ENDPOINTS"] = etcd.Endpoints[0]
	v["DQ_LOG_LEVEL"] = "error"
	app, _ := startStoppable(t, v)
	worktest.Schedule(t, e.Store, jsonTask("down-1", "t"))
	e.WaitState(t, 20*time.Second, task.StateSucceeded, "down-1")
	if g := declaredGauge(t, app); g != 0 {
		t.Fatalf("delayq_work_topics_declared %v with etcd down", g)
	}
	etcd.Restart(t)
	testenv.WaitFor(t, 30*time.Second, "topic declared once etcd is back", func() bool {
		ts, err := worked.List(t.Context(), cli, e.NS)
		return err == nil && len(ts) == 1 && ts[0].Topic == task.DefaultTopic && ts[0].By == app.id
	})
	testenv.WaitFor(t, 5*time.Second, "gauge 1", func() bool { return declaredGauge(t, app) == 1 })
}
