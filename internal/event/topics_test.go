package event

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// readyz reads an event process' /readyz.
func readyz(t *testing.T, addr string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// A missing dead topic is named in /readyz, which stays ready (tasks of
// every other topic still fire); once the topic exists, the body says so.
func TestReadyzNamesAMissingTopicAndStaysReady(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	cfg := w.config("topics-missing")
	cfg.DeadTopic = "absent.dead"
	a := w.startAppConfig(cfg)
	var code int
	var body map[string]any
	if !poll(15*time.Second, func() bool {
		code, body = readyz(t, a.Addr())
		return code == http.StatusOK && body["missing_topics"] != nil
	}) {
		t.Fatalf("/readyz = %d %v, want 200 naming the missing topic", code, body)
	}
	if got, _ := body["missing_topics"].([]any); len(got) != 1 || got[0] != "absent.dead" {
		t.Errorf("missing_topics = %v, want [absent.dead]", body["missing_topics"])
	}
	w.kafka.CreateTopic(t, "absent.dead", 2)
	if !poll(20*time.Second, func() bool {
		code, body = readyz(t, a.Addr())
		return code == http.StatusOK && body["kafka"] == "ok"
	}) {
		t.Fatalf("/readyz after the topic was created = %d %v, want kafka ok", code, body)
	}
}

// DQ_KAFKA_AUTO_CREATE creates the default and dead topics at start with
// DQ_PARTITIONS partitions.
func TestAutoCreateCreatesTheTopicsAtStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	cfg := w.config("topics-auto")
	cfg.DefaultTopic, cfg.DeadTopic = "auto.tasks", "auto.dead"
	cfg.KafkaAutoCreate, cfg.Partitions = true, 3
	a := w.startAppConfig(cfg)
	if !poll(15*time.Second, func() bool {
		code, body := readyz(t, a.Addr())
		return code == http.StatusOK && body["kafka"] == "ok"
	}) {
		t.Fatal("/readyz never said the topics are there")
	}
	for _, topic := range []string{"auto.tasks", "auto.dead"} {
		if ps := w.kafka.Cluster.PartitionInfos(topic); len(ps) != 3 {
			t.Errorf("%s: %d partitions, want 3", topic, len(ps))
		}
	}
}
