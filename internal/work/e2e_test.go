package work

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// runApp runs an app's Run until the end of the test.
// startDaemon runs a daemon on e's Redis (set, when not nil, changes its
// configuration first) and returns its base URL.
func startDaemon(t *testing.T, e *env, log *slog.Logger, set func(*daemon.Config)) string {
	t.Helper()
	dcfg := daemon.DefaultConfig()
	dcfg.Namespace, dcfg.Shards, dcfg.RedisAddrs = e.NS, shards, []string{e.Redis.Addr}
	dcfg.HTTPAddr, dcfg.JournalDir, dcfg.ShutdownGrace = "127.0.0.1:0", t.TempDir(), 5*time.Second
	if set != nil {
		set(&dcfg)
	}
	d, err := daemon.New(t.Context(), dcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runApp(t, "daemon", d.Run)
	return "http://" + d.Addr()
}

// startEvent runs an event process on e's Redis and Kafka and etcd, and
// waits until it leads every shard.
func startEvent(t *testing.T, e *env, etcd *testenv.Etcd, log *slog.Logger) {
	t.Helper()
	ecfg := event.DefaultConfig()
	ecfg.Namespace, ecfg.Shards, ecfg.RedisAddrs = e.NS, shards, []string{e.Redis.Addr}
	ecfg.EtcdEndpoints, ecfg.KafkaBrokers = etcd.Endpoints, e.Kafka.Brokers
	ecfg.HTTPAddr, ecfg.ProcessID, ecfg.ShutdownGrace = "127.0.0.1:0", "ev-1", 5*time.Second
	ev, err := event.New(t.Context(), ecfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runApp(t, "event", ev.Run)
	testenv.WaitFor(t, 15*time.Second, "event leads every shard", func() bool { return len(ev.Leading()) == shards })
}

func runApp(t *testing.T, name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// api calls the daemon and decodes a JSON answer into out (when not nil).
func api(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // every write, body or not
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// The whole path: tasks scheduled through the daemon's API are fired by an
// event process (etcd leadership, Redis -> Kafka in the pinned format) and
// handled by two work processes through a webhook sink. Each task is
// handled once; failures are retried through Redis and fired again by the
// event process; the dead one is listed by GET /v1/dead and redriven with
// POST /v1/dead/{id}/redrive.
func TestDaemonEventWorkEndToEnd(t *testing.T) {
	e := newEnv(t)
	etcd := testenv.StartEtcd(t)

	base := startDaemon(t, e, nil, nil)
	startEvent(t, e, etcd, nil)

	s := newSink(t)
	var mu sync.Mutex
	healed := false
	s.setRespond(func(c call, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := healed
		mu.Unlock()
		switch {
		case ok:
		case c.id == "flaky" && c.attempt <= 2:
			http.Error(w, "try later", http.StatusBadGateway)
		case c.id == "bad":
			http.Error(w, "unknown order", http.StatusUnprocessableEntity)
		}
	})
	startApp(t, e.vars(s.srv.URL+"/w1"))
	startApp(t, e.vars(s.srv.URL+"/w2"))

	const n = 200
	want := map[string]int{"flaky": 3, "bad": 1}
	var items []map[string]any
	for i := range n {
		id := fmt.Sprintf("e2e-%d", i)
		want[id] = 1
		items = append(items, map[string]any{"id": id, "type": "order.cancel", "payload": map[string]int{"n": i},
			"delay": fmt.Sprintf("%dms", 300+i*3)})
	}
	items = append(items,
		map[string]any{"id": "flaky", "type": "order.cancel", "payload": "x", "delay": "200ms"},
		map[string]any{"id": "bad", "type": "order.cancel", "payload": "x", "delay": "200ms", "max_attempts": 5})
	if code := api(t, http.MethodPost, base+"/v1/tasks/batch", map[string]any{"tasks": items}, nil); code/100 != 2 {
		t.Fatalf("batch schedule: %d", code)
	}
	var ids []string
	for id := range want {
		if id != "bad" {
			ids = append(ids, id)
		}
	}
	e.WaitState(t, 40*time.Second, task.StateSucceeded, ids...)
	e.WaitState(t, 10*time.Second, task.StateDead, "bad")
	wrong, byPath := s.check(want)
	if len(wrong) > 0 {
		t.Fatalf("sink: %v", wrong)
	}
	if byPath["/w1"] == 0 || byPath["/w2"] == 0 {
		t.Errorf("one work process did nothing: %v", byPath)
	}
	p50, p99, mx, cnt := s.lag()
	t.Logf("daemon -> event -> work -> webhook, %d calls: lag (sink receive - due) p50 %v p99 %v max %v; per worker %v",
		cnt, p50.Round(time.Millisecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), byPath)

	var dead struct {
		Dead []struct {
			ID        string `json:"id"`
			State     string `json:"state"`
			Attempt   int    `json:"attempt"`
			LastError string `json:"last_error"`
		} `json:"dead"`
	}
	if code := api(t, http.MethodGet, base+"/v1/dead", nil, &dead); code != http.StatusOK {
		t.Fatalf("GET /v1/dead: %d", code)
	}
	if len(dead.Dead) != 1 || dead.Dead[0].ID != "bad" || !strings.Contains(dead.Dead[0].LastError, "422 Unprocessable Entity: unknown order") {
		t.Fatalf("GET /v1/dead: %+v", dead)
	}
	mu.Lock()
	healed = true
	mu.Unlock()
	if code := api(t, http.MethodPost, base+"/v1/dead/bad/redrive", nil, nil); code != http.StatusOK {
		t.Fatalf("redrive: %d", code)
	}
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "bad")
	if c := s.count("bad"); c != 2 {
		t.Errorf("bad called %d times after redrive, want 2", c)
	}
}
