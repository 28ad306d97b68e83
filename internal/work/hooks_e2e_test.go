package work

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// writeHooksConfig writes a DQ_WORK_CONFIG file whose "*" entry sends
// succeeded outcomes to <url>/ok and dead ones to <url>/dead.
func writeHooksConfig(t *testing.T, url string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "work.json")
	body := `{"hooks": {"*": {"on_success": "` + url + `/ok", "on_failure": "` + url + `/dead", "timeout": "5s"}}}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The real work App: tasks that succeed at once, succeed after a retry,
// and die (a 400, or out of attempts) call on_success or on_failure once
// each, signed, with the outcome record as the body; the outcome records
// are all committed by the hooks' group.
func TestHooksEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.Kafka.CreateTopic(t, record.DefaultOutcomesTopic, 4)
	s := newSink(t)
	s.setRespond(func(c call, w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(c.id, "flaky-") && c.attempt == 1:
			http.Error(w, "restarting", http.StatusInternalServerError)
		case strings.HasPrefix(c.id, "bad-"):
			http.Error(w, "no such order", http.StatusBadRequest)
		case strings.HasPrefix(c.id, "down-"):
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		}
	})
	hs := newHookSink(t)
	vars := e.vars(s.srv.URL + "/w1")
	vars["DQ_WORK_CONFIG"] = writeHooksConfig(t, hs.srv.URL)
	app := startApp(t, vars)
	e.Firer.Start(t)

	want := map[string]string{} // id -> hook path
	var ok, dead []string
	var tasks []*task.Task
	add := func(id, path string, maxAttempts int) {
		tk := jsonTask(id, "order.cancel")
		tk.MaxAttempts = maxAttempts
		tasks = append(tasks, tk)
		want[id] = path
		if path == "/ok" {
			ok = append(ok, id)
		} else {
			dead = append(dead, id)
		}
	}
	for i := range 5 {
		add("ok-"+itoa(i), "/ok", 3)
	}
	add("flaky-1", "/ok", 3)
	add("flaky-2", "/ok", 3)
	add("bad-1", "/dead", 3)
	add("down-1", "/dead", 2)
	worktest.Schedule(t, e.Store, tasks...)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ok...)
	e.WaitState(t, 30*time.Second, task.StateDead, dead...)

	// every outcome record in the topic is committed by the hooks' group:
	// no call is left to come
	n := len(worktest.ReadTopic(t, e.Kafka, record.DefaultOutcomesTopic, len(want), 20*time.Second))
	testenv.WaitFor(t, 20*time.Second, "hooks group committed every outcome record", func() bool {
		return sumOffsets(committedOffsets(t, e.Kafka, e.Group+HooksGroupSuffix, record.DefaultOutcomesTopic)) >= int64(n)
	})
	got := map[string][]string{}
	for _, c := range hs.all() {
		id := c.header.Get("Dq-Id")
		got[id] = append(got[id], c.path)
		if c.sigErr != nil {
			t.Errorf("%s: signature: %v", id, c.sigErr)
		}
		o, err := record.ParseOutcome(&kafka.Message{Value: c.body})
		if err != nil || o.ID != id || o.Type != "order.cancel" {
			t.Errorf("%s: body %s: %v", id, c.body, err)
		} else if (c.path == "/ok") != (o.Outcome == record.OutcomeSucceeded) || (c.path == "/dead") != (o.Outcome == record.OutcomeDead) {
			t.Errorf("%s: outcome %s posted to %s", id, o.Outcome, c.path)
		}
	}
	for id, path := range want {
		if g := got[id]; len(g) != 1 || g[0] != path {
			t.Errorf("%s: hooks called %v, want once %s", id, g, path)
		}
	}
	if len(got) != len(want) {
		t.Errorf("hooks called for %d tasks, want %d: %v", len(got), len(want), got)
	}

	resp, err := httpGet("http://" + app.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`delayq_hook_calls_total{hook="on_success",result="ok"} 7`,
		`delayq_hook_calls_total{hook="on_failure",result="ok"} 2`, "delayq_hook_call_duration_seconds_bucket"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// A missing outcomes topic does not make a process with hooks unready (the
// hooks are not what it is ready for: tasks are); the hooks consumer
// waits, and calls hooks once the topic exists.
func TestHooksWaitForTheOutcomesTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := strictKafka(t)
	hs := newHookSink(t)
	vars := e.vars("http://127.0.0.1:1/unused")
	vars["DQ_KAFKA_BROKERS"] = k.Brokers[0]
	vars["DQ_OUTCOMES_TOPIC"] = "absent.outcomes"
	vars["DQ_WORK_CONFIG"] = writeHooksConfig(t, hs.srv.URL)
	app := runUnready(t, vars)
	testenv.WaitFor(t, 15*time.Second, "ready without the outcomes topic", func() bool {
		code, _ := workReadyz(t, app)
		return code == http.StatusOK
	})
	k.CreateTopic(t, "absent.outcomes", 2)
	w := worktest.NewWriter(t, k.Brokers)
	o := &record.OutcomeRecord{ID: "order-1", Type: "order.cancel", Outcome: record.OutcomeDead, Attempt: 1, MaxAttempts: 1,
		FinishedAt: time.Now(), Shard: -1}
	if err := w.WriteMessages(t.Context(), record.EncodeOutcome(o, "absent.outcomes")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "on_failure called once the topic exists", func() bool { return hs.count() >= 1 })
	if c := hs.all()[0]; c.path != "/dead" || c.header.Get("Dq-Id") != "order-1" {
		t.Errorf("call %s %s", c.path, c.header.Get("Dq-Id"))
	}
}
