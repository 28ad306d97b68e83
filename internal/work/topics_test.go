package work

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// runUnready runs a work App until the end of the test without waiting
// for it to be ready.
func runUnready(t *testing.T, vars map[string]string) *App {
	t.Helper()
	return runUnreadyLog(t, vars, nil)
}

// runUnreadyLog is runUnready logging to log (nil: the configured logger).
func runUnreadyLog(t *testing.T, vars map[string]string, log *slog.Logger) *App {
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
	if log == nil {
		log = cfg.Logger("work")
	}
	app, err := New(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("work app: %v", err)
		}
	})
	return app
}

// strictKafka is a broker that never creates topics by itself
// (worktest.StrictKafka) with the task and dead topics.
func strictKafka(t *testing.T) *testenv.Kafka {
	t.Helper()
	return worktest.StrictKafka(t, "dq.tasks", "dq.dead")
}

func workReadyz(t *testing.T, app *App) (int, string) {
	t.Helper()
	code, body := workReadyzBody(t, app)
	return code, body.Reason
}

// workReadyzBody is /readyz's status and body.
func workReadyzBody(t *testing.T, app *App) (int, admin.ReadyBody) {
	t.Helper()
	var body admin.ReadyBody
	resp, err := httpGet("http://" + app.Addr() + "/readyz")
	if err != nil {
		body.Reason = err.Error()
		return 0, body
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		body.Reason = "decode /readyz: " + err.Error()
	}
	return resp.StatusCode, body
}

// A missing dead topic does not make the process unready (issue 43): the
// worker consumes and runs tasks (a failing one ends dead in Redis), and
// the dead topic is reported on a line of /readyz's body, by
// delayq_work_dead_topic_missing and by a WARN log; once it exists, the
// line, the metric and an INFO say so.
func TestWorkReadyWithoutTheDeadTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := worktest.StrictKafka(t, "dq.tasks") // no dead topic
	s := newSink(t)
	vars := e.vars(s.srv.URL + "/w")
	vars["DQ_KAFKA_BROKERS"] = k.Brokers[0]
	vars["DQ_DEAD_TOPIC"] = "absent.dead"
	logs := &logBuffer{}
	app := runUnreadyLog(t, vars, slog.New(slog.NewTextHandler(logs, nil)))
	const line = "kafka dead topic absent.dead: missing, not needed to be ready"
	var body admin.ReadyBody
	testenv.WaitFor(t, 20*time.Second, "ready, reporting the missing dead topic", func() bool {
		var code int
		code, body = workReadyzBody(t, app)
		return code == http.StatusOK && slices.ContainsFunc(body.Checks, func(c string) bool { return strings.HasPrefix(c, line) })
	})
	if body.Status != "ready" || !strings.HasPrefix(body.Reason, line) {
		t.Errorf("readyz body %+v: want status ready, reason the dead topic's line", body)
	}
	testenv.WaitFor(t, 10*time.Second, "delayq_work_dead_topic_missing 1 and a WARN", func() bool {
		return strings.Contains(scrape(t, app), "delayq_work_dead_topic_missing 1") &&
			strings.Contains(logs.String(), `level=WARN msg="kafka dead topic missing`)
	})

	// the worker works: a task whose webhook answers 400 ends dead in Redis
	e.Firer.Writer = worktest.NewWriter(t, k.Brokers)
	e.Firer.Start(t)
	s.setRespond(func(_ call, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })
	worktest.Schedule(t, e.Store, jsonTask("doomed", "order.cancel"))
	e.WaitState(t, 20*time.Second, task.StateDead, "doomed")

	k.CreateTopic(t, "absent.dead", 2)
	testenv.WaitFor(t, 20*time.Second, "the dead topic reported present", func() bool {
		code, b := workReadyzBody(t, app)
		return code == http.StatusOK && b.Reason == "" && slices.Contains(b.Checks, "kafka dead topic absent.dead: present") &&
			strings.Contains(scrape(t, app), "delayq_work_dead_topic_missing 0") &&
			strings.Contains(logs.String(), `level=INFO msg="kafka dead topic present"`)
	})
}

// A consumed topic that does not exist makes the process unready, naming
// the topic; once it exists, the process is ready.
func TestWorkNotReadyWhileATopicIsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := strictKafka(t)
	vars := e.vars("http://127.0.0.1:1/unused")
	vars["DQ_KAFKA_BROKERS"] = k.Brokers[0]
	vars["DQ_TOPICS"] = "dq.tasks,absent.topic"
	app := runUnready(t, vars)
	var code int
	var reason string
	testenv.WaitFor(t, 15*time.Second, "readyz naming the missing topic", func() bool {
		code, reason = workReadyz(t, app)
		return code == http.StatusServiceUnavailable && strings.Contains(reason, "absent.topic")
	})
	if strings.Contains(reason, "dq.tasks") {
		t.Errorf("readyz reason %q names a topic that exists", reason)
	}
	k.CreateTopic(t, "absent.topic", 2)
	testenv.WaitFor(t, 20*time.Second, "ready once the topic exists", func() bool {
		code, reason = workReadyz(t, app)
		return code == http.StatusOK
	})
}

// DQ_KAFKA_AUTO_CREATE creates the consumed and dead topics at start with
// DQ_PARTITIONS partitions.
func TestWorkAutoCreateCreatesItsTopics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := strictKafka(t)
	vars := e.vars("http://127.0.0.1:1/unused")
	vars["DQ_KAFKA_BROKERS"] = k.Brokers[0]
	vars["DQ_TOPICS"] = "made.tasks"
	vars["DQ_DEAD_TOPIC"] = "made.dead"
	vars["DQ_KAFKA_AUTO_CREATE"] = "true"
	vars["DQ_PARTITIONS"] = "3"
	app := runUnready(t, vars)
	testenv.WaitFor(t, 15*time.Second, "ready with the topics created", func() bool {
		code, _ := workReadyz(t, app)
		return code == http.StatusOK
	})
	for _, topic := range []string{"made.tasks", "made.dead"} {
		if ps := k.Cluster.PartitionInfos(topic); len(ps) != 3 {
			t.Errorf("%s: %d partitions, want 3", topic, len(ps))
		}
	}
}
