package work

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// runUnready runs a work App until the end of the test without waiting
// for it to be ready.
func runUnready(t *testing.T, vars map[string]string) *App {
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
	resp, err := httpGet("http://" + app.Addr() + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var body map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body["reason"]
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
