package work

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// startApp runs a work App in this process until the end of the test and
// waits until it is ready.
func startApp(t *testing.T, vars map[string]string) *App {
	t.Helper()
	app := runUnready(t, vars)
	testenv.WaitFor(t, 10*time.Second, "work app ready", func() bool {
		resp, err := httpGet("http://" + app.Addr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return app
}

// Tasks fired in the pinned record format are handled once each by two work
// processes (in-process Apps) through a webhook sink; signatures verify.
func TestWorkEndToEndTwoWorkers(t *testing.T) {
	e := newEnv(t)
	s := newSink(t)
	a1 := startApp(t, e.vars(s.srv.URL+"/w1"))
	startApp(t, e.vars(s.srv.URL+"/w2"))
	e.Firer.Start(t)

	const n = 300
	want := map[string]int{}
	var ids []string
	for i := range n {
		id := "order-" + itoa(i)
		ids = append(ids, id)
		want[id] = 1
		worktest.Schedule(t, e.Store, jsonTask(id, "order.cancel"))
		if i%30 == 29 {
			time.Sleep(20 * time.Millisecond) // a stream, not one burst
		}
	}
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
	wrong, byPath := s.check(want)
	if len(wrong) > 0 {
		t.Fatalf("sink: %v", wrong)
	}
	if byPath["/w1"] == 0 || byPath["/w2"] == 0 {
		t.Errorf("one worker did nothing: %v", byPath)
	}
	p50, p99, mx, cnt := s.lag()
	t.Logf("e2e lag (sink receive - due; test firer polls every 10ms) over %d calls: p50 %v p99 %v max %v; per worker %v",
		cnt, p50.Round(time.Millisecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), byPath)

	resp, err := httpGet("http://" + a1.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`delayq_work_handled_total{outcome="succeeded",type="order.cancel"}`,
		"delayq_work_e2e_lag_seconds_bucket", "delayq_work_handler_duration_seconds_bucket",
		"delayq_work_consumer_lag", "delayq_work_running", "delayq_work_retries_total", "delayq_work_dead_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// A sink that fails some tasks twice with 500, some with 400, some by
// timing out, some with 429 + Retry-After, and some always: each is retried
// the right number of times with growing delays; permanent failures and
// exhausted tasks end dead with their last error, in the dead topic; a
// redriven one succeeds.
func TestWorkFailuresRetriesDead(t *testing.T) {
	e := newEnv(t)
	s := newSink(t)
	var mu sync.Mutex
	healed := false
	s.setRespond(func(c call, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := healed
		mu.Unlock()
		switch {
		case ok:
		case strings.HasPrefix(c.id, "flaky-") && c.attempt <= 2:
			http.Error(w, "database is restarting", http.StatusInternalServerError)
		case strings.HasPrefix(c.id, "bad-"):
			http.Error(w, `{"error":"order not found"}`, http.StatusBadRequest)
		case strings.HasPrefix(c.id, "slow-") && c.attempt == 1:
			<-r.Context().Done() // until the worker gives up
		case strings.HasPrefix(c.id, "limited-") && c.attempt == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case strings.HasPrefix(c.id, "down-"):
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		}
	})
	startApp(t, e.vars(s.srv.URL+"/w1"))
	e.Firer.Start(t)

	mk := func(id string, maxAttempts int, timeout time.Duration) *task.Task {
		tk := jsonTask(id, "order.cancel")
		tk.MaxAttempts, tk.Timeout = maxAttempts, timeout
		return tk
	}
	worktest.Schedule(t, e.Store,
		mk("flaky-1", 5, 0), mk("flaky-2", 5, 0),
		mk("bad-1", 5, 0),
		mk("slow-1", 5, 300*time.Millisecond),
		mk("limited-1", 5, 0),
		mk("down-1", 3, 0),
	)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, "flaky-1", "flaky-2", "slow-1", "limited-1")
	e.WaitState(t, 30*time.Second, task.StateDead, "bad-1", "down-1")

	wrong, _ := s.check(map[string]int{"flaky-1": 3, "flaky-2": 3, "bad-1": 1, "slow-1": 2, "limited-1": 2, "down-1": 3})
	if len(wrong) > 0 {
		t.Errorf("sink calls: %v", wrong)
	}
	for _, id := range []string{"flaky-1", "flaky-2", "down-1"} {
		cs := s.get(id)
		// the delay chosen after attempt n: the next attempt's due time
		// (stored by the worker as Redis' clock + delay) minus when attempt n
		// reached the sink; free of the firing and consuming latency.
		d1, d2 := cs[1].dueAt.Sub(cs[0].at), cs[2].dueAt.Sub(cs[1].at)
		t.Logf("%s: attempts %d,%d,%d at +0, +%v, +%v; retry delays %v then %v (backoff 100ms doubling, jitter 0.2)",
			id, cs[0].attempt, cs[1].attempt, cs[2].attempt, cs[1].at.Sub(cs[0].at).Round(time.Millisecond),
			cs[2].at.Sub(cs[0].at).Round(time.Millisecond), d1.Round(time.Millisecond), d2.Round(time.Millisecond))
		if d2 <= d1 || d1 < 78*time.Millisecond { // 80ms minus the due time's ms truncation
			t.Errorf("%s: delays do not grow: %v then %v", id, d1, d2)
		}
	}
	if cs := s.get("limited-1"); cs[1].at.Sub(cs[0].at) < time.Second || cs[1].dueAt.Sub(cs[0].at) > 1200*time.Millisecond {
		t.Errorf("Retry-After: 1 honoured after %v (due after %v)", cs[1].at.Sub(cs[0].at), cs[1].dueAt.Sub(cs[0].at))
	}

	dead, err := e.Store.ListDead(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	lastErr := map[string]string{}
	for _, d := range dead {
		lastErr[d.Task.ID] = d.Task.LastError
	}
	if !strings.Contains(lastErr["bad-1"], `400 Bad Request: {"error":"order not found"}`) ||
		!strings.Contains(lastErr["down-1"], "503 Service Unavailable: maintenance") || len(lastErr) != 2 {
		t.Errorf("dead set: %q", lastErr)
	}
	recs := worktest.ReadTopic(t, e.Kafka, "dq.dead", 2, 10*time.Second)
	for _, r := range recs {
		id, _ := testenv.Header(r, "dq-id")
		why, _ := testenv.Header(r, "dq-error")
		if why != lastErr[id] {
			t.Errorf("dead letter %s: dq-error %q, dead set %q", id, why, lastErr[id])
		}
	}

	mu.Lock()
	healed = true
	mu.Unlock()
	if _, err := e.Store.Redrive(t.Context(), "down-1"); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "down-1")
	if n := s.count("down-1"); n != 4 {
		t.Errorf("down-1 called %d times after redrive, want 4", n)
	}
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// httpGet is a GET without keep-alive (no idle connection outlives the test).
func httpGet(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Close = true
	return http.DefaultClient.Do(req)
}
