package daemon

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/record"
)

func TestTopicPolicy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OutcomesTopic, cfg.DeadTopic = "acme.outcomes", "acme.dead"
	open := newTopicPolicy(&cfg)
	cfg.AllowedTopics = []string{"orders.*", "billing"}
	narrow := newTopicPolicy(&cfg)
	cfg.AllowedTopics, cfg.OutcomesTopic = nil, "none"
	noOutcomes := newTopicPolicy(&cfg)
	for _, c := range []struct {
		p     topicPolicy
		topic string
		want  string // in the reason; "": allowed
	}{
		{open, "", ""},
		{open, "orders.paid", ""},
		{open, "dq.tasks", ""},
		{open, "acme.outcomes", "outcomes topic"},
		{open, record.DefaultOutcomesTopic, "outcomes topic"}, // the default stays reserved
		{open, "acme.dead", "dead-letter topic"},
		{open, DefaultDeadTopic, "dead-letter topic"},
		{open, "__consumer_offsets", "Kafka-internal"},
		{open, "__transaction_state", "Kafka-internal"},
		{open, "__anything", "Kafka-internal"},
		{open, "_one_underscore", ""},
		{narrow, "", ""}, // the default topic: the operator's choice
		{narrow, "orders.paid", ""},
		{narrow, "billing", ""},
		{narrow, "billing.x", "not in DQ_ALLOWED_TOPICS"},
		{narrow, "orders", "not in DQ_ALLOWED_TOPICS"},
		{narrow, "acme.outcomes", "outcomes topic"},
		{noOutcomes, record.DefaultOutcomesTopic, "outcomes topic"},
		{noOutcomes, "none", ""},
	} {
		got := c.p.refuse(c.topic)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v refuse(%q) = %q, want %q", c.p, c.topic, got, c.want)
		}
	}
	cfg.AllowedTopics = []string{"*"} // reserved topics stay refused when a pattern matches them
	if got := newTopicPolicy(&cfg).refuse(DefaultDeadTopic); got == "" {
		t.Errorf("allowed * lets %s through", DefaultDeadTopic)
	}
}

// A task naming delayq's own topics (the outcomes topic, its default
// name, the dead-letter topic) or a Kafka-internal one is refused at
// submit, single or in a batch, and in a schedule's template: 422 naming
// topic, nothing stored. The rest is accepted (issue 40: a task fired
// into the outcomes topic forges an outcome record).
func TestTopicsReservedRefused(t *testing.T) {
	r, _, cfg := startRedisEtcd(t)
	cfg.OutcomesTopic = "acme.outcomes"
	app := startApp(t, cfg)
	rdb := r.Client(t)
	openStore(t, rdb, cfg)
	keysBefore := keyCount(t, rdb, cfg.Namespace)

	bad := []string{"acme.outcomes", record.DefaultOutcomesTopic, "dq.dead", "__consumer_offsets"}
	// an outcome record as payload, the forgery of the issue
	forged := `{"id":"order-43","type":"order.charge","outcome":"succeeded","attempt":1,"max_attempts":3,"finished_at":"2030-01-01T00:00:00.000Z","duration_ms":1,"shard":0}`
	for i, topic := range bad {
		id := fmt.Sprintf("bad-%d", i)
		got := app.do("POST", "/v1/tasks", `{"id":"`+id+`","type":"order.charge","topic":"`+topic+`","payload":`+forged+`}`)
		if got.Status != 422 || got.errCode() != "invalid_task" || !strings.HasPrefix(got.errMessage(), "topic: "+topic+" is ") {
			t.Errorf("POST topic %s: %d %s", topic, got.Status, got.Raw)
		}
		if got := app.do("GET", "/v1/tasks/"+id, ""); got.Status != 404 {
			t.Errorf("GET %s after the refusal: %d %s", id, got.Status, got.Raw)
		}
		sch := app.do("PUT", "/v1/schedules/s-"+id, `{"cron":"@hourly","task":{"type":"order.charge","topic":"`+topic+`"}}`)
		if sch.Status != 422 || sch.errCode() != codeInvalidSchedule || !strings.HasPrefix(sch.errMessage(), "task.topic: "+topic+" is ") {
			t.Errorf("PUT schedule topic %s: %d %s", topic, sch.Status, sch.Raw)
		}
		if got := app.do("GET", "/v1/schedules/s-"+id, ""); got.Status != 404 {
			t.Errorf("schedule s-%s after the refusal: %d %s", id, got.Status, got.Raw)
		}
	}
	if n := keyCount(t, rdb, cfg.Namespace); n != keysBefore {
		t.Fatalf("refused tasks changed the store: %d keys, then %d", keysBefore, n)
	}

	// a batch: each refused item has its error, the others are stored
	items := []string{`{"id":"ok-1","type":"x","topic":"orders.paid","delay":"1h"}`}
	for i, topic := range bad {
		items = append(items, fmt.Sprintf(`{"id":"bb-%d","type":"x","topic":"%s","delay":"1h"}`, i, topic))
	}
	items = append(items, `{"id":"ok-2","type":"x","delay":"1h"}`)
	got := app.do("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
	if got.Status != 200 {
		t.Fatalf("batch: %d %s", got.Status, got.Raw)
	}
	var resp struct {
		Results []struct {
			ID, State string
			Error     *struct{ Code, Message string }
		}
	}
	if err := json.Unmarshal(got.Raw, &resp); err != nil || len(resp.Results) != len(items) {
		t.Fatalf("batch answer %s: %v", got.Raw, err)
	}
	for i, res := range resp.Results {
		if i == 0 || i == len(items)-1 {
			if res.Error != nil || res.State != "scheduled" {
				t.Errorf("batch item %d: %+v", i, res)
			}
			continue
		}
		if res.Error == nil || res.Error.Code != "invalid_task" || !strings.HasPrefix(res.Error.Message, "topic: "+bad[i-1]) {
			t.Errorf("batch item %d (topic %s): %+v", i, bad[i-1], res)
		}
		if g := app.do("GET", fmt.Sprintf("/v1/tasks/bb-%d", i-1), ""); g.Status != 404 {
			t.Errorf("bb-%d stored: %d", i-1, g.Status)
		}
	}
	for _, id := range []string{"ok-1", "ok-2"} {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.Status != 200 {
			t.Errorf("%s not stored: %d %s", id, g.Status, g.Raw)
		}
	}
	if got := app.do("PUT", "/v1/schedules/fine", `{"cron":"@hourly","task":{"type":"x","topic":"orders.paid"}}`); got.Status != 201 {
		t.Errorf("PUT schedule with an allowed topic: %d %s", got.Status, got.Raw)
	}
}

// With DQ_ALLOWED_TOPICS, a topic matching none of its patterns is
// refused (422 naming topic, nothing stored); matching topics and the
// default topic are accepted.
func TestTopicsAllowlist(t *testing.T) {
	r, _, cfg := startRedisEtcd(t)
	cfg.AllowedTopics = []string{"orders.*"}
	app := startApp(t, cfg)
	rdb := r.Client(t)
	openStore(t, rdb, cfg)
	keysBefore := keyCount(t, rdb, cfg.Namespace)

	got := app.do("POST", "/v1/tasks", `{"id":"b","type":"x","topic":"billing.x","delay":"1h"}`)
	if got.Status != 422 || got.errCode() != "invalid_task" || got.errMessage() != "topic: billing.x is not in DQ_ALLOWED_TOPICS" {
		t.Errorf("billing.x: %d %s", got.Status, got.Raw)
	}
	sch := app.do("PUT", "/v1/schedules/b", `{"cron":"@hourly","task":{"type":"x","topic":"billing.x"}}`)
	if sch.Status != 422 || sch.errMessage() != "task.topic: billing.x is not in DQ_ALLOWED_TOPICS" {
		t.Errorf("schedule billing.x: %d %s", sch.Status, sch.Raw)
	}
	if n := keyCount(t, rdb, cfg.Namespace); n != keysBefore {
		t.Fatalf("a refused task changed the store: %d keys, then %d", keysBefore, n)
	}
	for id, body := range map[string]string{
		"o": `{"id":"o","type":"x","topic":"orders.paid","delay":"1h"}`,
		"d": `{"id":"d","type":"x","delay":"1h"}`,
	} {
		if got := app.do("POST", "/v1/tasks", body); got.Status != 201 {
			t.Errorf("%s: %d %s", id, got.Status, got.Raw)
		}
	}
}
