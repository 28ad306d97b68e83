package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// With DQ_KAFKA_BROKERS the daemon publishes one "cancelled" outcome
// record for every task it cancels, by DELETE /v1/tasks/{id} and by POST
// /v1/tasks/cancel (ids and filter); a cancel that changes nothing (the
// task is gone or cancelled already) publishes nothing.
func TestCancelPublishesOutcomes(t *testing.T) {
	const topic = "daemon.outcomes"
	k := testenv.StartKafka(t, topic)
	col := k.Collect(t, topic)
	cfg := testConfig(t, startRedis(t).Addr)
	cfg.KafkaBrokers, cfg.OutcomesTopic = k.Brokers, topic
	app := startApp(t, cfg)

	for i := range 6 {
		body := fmt.Sprintf(`{"id":"c-%d","type":"order.cancel","delay":"1h","max_attempts":3,"headers":{"tenant":"t%d"}}`, i, i)
		if rp := app.do("POST", "/v1/tasks", body); rp.Status != 201 {
			t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
		}
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"f-1","type":"filtered","delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("DELETE", "/v1/tasks/c-0", ""); rp.Status != 200 {
		t.Fatalf("cancel: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("DELETE", "/v1/tasks/c-0", ""); rp.Status == 200 {
		t.Fatalf("second cancel: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("POST", "/v1/tasks/cancel", `{"ids":["c-1","c-2","c-0","nope"]}`); rp.Status != 200 || rp.JSON["changed"] != float64(2) {
		t.Fatalf("bulk cancel: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("POST", "/v1/tasks/cancel", `{"filter":{"type":"filtered"}}`); rp.Status != 200 || rp.JSON["changed"] != float64(1) {
		t.Fatalf("bulk cancel by filter: %d %s", rp.Status, rp.Raw)
	}
	testenv.WaitFor(t, 10*time.Second, "4 outcome records", func() bool { return col.Total() >= 4 })
	// every publish is counted: the count says no record came twice
	testenv.WaitFor(t, 5*time.Second, "published metric", func() bool {
		return counterValue(t, app.App, "delayq_outcomes_published_total", "outcome", "cancelled") == 4
	})
	got := map[string]*record.OutcomeRecord{}
	for _, r := range col.All() {
		o := testenv.ParseOutcome(t, r)
		if got[o.ID] != nil {
			t.Errorf("%s published twice", o.ID)
		}
		got[o.ID] = o
	}
	if len(got) != 4 || col.Total() != 4 {
		t.Fatalf("records %d for %v, want c-0, c-1, c-2, f-1", col.Total(), got)
	}
	for _, id := range []string{"c-0", "c-1", "c-2", "f-1"} {
		o := got[id]
		if o == nil {
			t.Errorf("no record for %s", id)
			continue
		}
		wantType, wantTenant, wantMax := "order.cancel", "t"+id[2:], 3
		if id == "f-1" {
			wantType, wantTenant, wantMax = "filtered", "", 10
		}
		if o.Outcome != record.OutcomeCancelled || o.Type != wantType || o.Headers["tenant"] != wantTenant ||
			o.Attempt != 1 || o.MaxAttempts != wantMax || o.Error != "" || o.Duration != 0 || o.Shard < 0 ||
			o.DueAt.Sub(o.FinishedAt) < 59*time.Minute {
			t.Errorf("%s: %+v", id, o)
		}
	}
}

// Without DQ_KAFKA_BROKERS the daemon has no publisher (and cancels as
// before).
func TestCancelWithoutBrokersPublishesNothing(t *testing.T) {
	cfg := testConfig(t, startRedis(t).Addr)
	app := startApp(t, cfg)
	if app.outcomes != nil {
		t.Fatal("a publisher without brokers")
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"x","type":"t","delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("POST", "/v1/tasks/cancel", `{"ids":["x"]}`); rp.Status != 200 || rp.JSON["changed"] != float64(1) {
		t.Fatalf("bulk cancel: %d %s", rp.Status, rp.Raw)
	}
}

// counterValue reads a counter of the app's registry by one label, -1
// when it has no such series.
func counterValue(t *testing.T, a *App, name, label, value string) float64 {
	t.Helper()
	v, ok := testenv.MetricValue(a.Registry(), name, label, value)
	if !ok {
		return -1
	}
	return v
}

// The daemon's Kafka settings: no brokers by default (no outcomes), the
// outcomes topic dq.outcomes; bad values are config errors naming the
// setting.
func TestConfigOutcomes(t *testing.T) {
	c := DefaultConfig()
	if len(c.KafkaBrokers) != 0 || c.OutcomesTopic != record.DefaultOutcomesTopic {
		t.Errorf("defaults: brokers %v topic %q", c.KafkaBrokers, c.OutcomesTopic)
	}
	c.OutcomesTopic = "bad topic"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "outcomes-topic") {
		t.Errorf("bad topic: %v", err)
	}
	c = DefaultConfig()
	c.SASLMechanism = "GSSAPI"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "DQ_KAFKA_SASL_MECHANISM") {
		t.Errorf("bad SASL mechanism: %v", err)
	}
}
