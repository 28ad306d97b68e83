package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/client"
)

// kafkaAdmin is a franz-go client for topic administration from the test.
func kafkaAdmin(t *testing.T, c Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(c.KafkaOpts()...)
	if err != nil {
		t.Fatalf("kafka admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// setTopicMaxMessageBytes sets a topic's max.message.bytes.
func setTopicMaxMessageBytes(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Op, cfg.Value = "max.message.bytes", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(fmt.Sprint(n))
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(t.Context(), cl)
	if err == nil && len(resp.Resources) == 1 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("set max.message.bytes of %s to %d: %v", topic, n, err)
	}
}

// createTopic creates a topic of one partition.
func createTopic(t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), cl)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// deleteTopic deletes a topic.
func deleteTopic(t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(t.Context(), cl)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}

// deliveryLag is the webhook's arrival minus the due time of each first
// completed delivery: the lag a user's service sees.
func deliveryLag(rec *recorder, ids []string) string {
	done := rec.done()
	var lags []time.Duration
	for _, id := range ids {
		if ds := done[id]; len(ds) > 0 {
			lags = append(lags, ds[0].At.Sub(ds[0].DueAt))
		}
	}
	if len(lags) == 0 {
		return "no deliveries"
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	return fmt.Sprintf("webhook arrival − due over %d tasks: p50 %v, p99 %v, max %v",
		len(lags), q(0.50).Round(100*time.Microsecond), q(0.99).Round(100*time.Microsecond), lags[len(lags)-1].Round(100*time.Microsecond))
}

// scenarioPoison: 2,000 ordinary tasks due over 5 s, once alone and once
// with a task to a topic that does not exist and a task whose record is
// larger than its topic accepts, due in the middle of them. The ordinary
// tasks fire and are handled either way, never early (their lag is printed
// for both rounds side by side); each poison task ends dead with a reason
// naming its cause within 60 s, is listed by GET /v1/dead, and fires when
// redriven once the topic exists and the limit is raised.
func scenarioPoison(t *testing.T, p Provisioner) {
	const grace = 3 * time.Second
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 2, Workers: 2, Webhook: rec,
		Env: map[string]string{"DQ_FIRE_POISON_GRACE": grace.String()}})
	admin := kafkaAdmin(t, c)
	// The tasks topic takes less than the daemon's DQ_MAX_RECORD_BYTES:
	// a misconfiguration the daemon cannot see, met at fire.
	setTopicMaxMessageBytes(t, admin, "dq.tasks", 64<<10)
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)
	missing := uniqueName("it.missing.")

	round := func(prefix string, poison bool) (ordinary []string, poisonIDs map[string]string) {
		first := time.Now().Add(1500 * time.Millisecond)
		tasks := spread(prefix, "it.poison.ordinary", 2000, first, 2500*time.Microsecond)
		want := map[string]expected{}
		for i := 0; i < len(tasks); i += 1000 {
			for id, e := range scheduleBatch(t, api, tasks[i:min(i+1000, len(tasks))]) {
				want[id] = e
			}
		}
		if poison {
			mid := first.Add(2500 * time.Millisecond)
			poisonIDs = map[string]string{prefix + "-topic": missing, prefix + "-large": "too large"}
			for _, task := range []client.Task{
				{ID: prefix + "-topic", Type: "it.poison", Topic: missing, Payload: json.RawMessage(`{"p":1}`), DueAt: mid},
				{ID: prefix + "-large", Type: "it.poison", DueAt: mid,
					Payload: json.RawMessage(`{"blob":"` + strings.Repeat("x", 96<<10) + `"}`)},
			} {
				r, err := api.Schedule(t.Context(), task)
				if err != nil || r.State != "scheduled" {
					t.Fatalf("schedule %s: %+v, %v", task.ID, r, err)
				}
			}
		}
		ordinary = keys(want)
		rec.waitDone(t, ordinary, 60*time.Second)
		kl.waitRecords(t, ordinary, 10*time.Second)
		checkRecords(t, kl, want)
		return ordinary, poisonIDs
	}

	alone, _ := round("calm", false)
	withPoison, poisonIDs := round("pois", true)
	checkNeverEarly(t, rec)
	var recsAlone, recsPoison []*kgo.Record
	for _, id := range alone {
		recsAlone = append(recsAlone, kl.records(id)...)
	}
	for _, id := range withPoison {
		recsPoison = append(recsPoison, kl.records(id)...)
	}
	t.Logf("poison: without poison tasks: %s; %s", lagStats(recsAlone), deliveryLag(rec, alone))
	t.Logf("poison: with 2 poison tasks:  %s; %s", lagStats(recsPoison), deliveryLag(rec, withPoison))

	// Each poison task ends dead, with its reason, and is listed.
	deadStart := time.Now()
	waitFor(t, 60*time.Second, "poison tasks dead with their reasons", func() (bool, string) {
		for id, reason := range poisonIDs {
			ti, err := api.Get(t.Context(), id)
			if err != nil {
				return false, err.Error()
			}
			if ti.State != "dead" || !strings.Contains(strings.ToLower(ti.LastError), strings.ToLower(reason)) {
				return false, fmt.Sprintf("%s is %s, last error %q (want dead naming %q)", id, ti.State, ti.LastError, reason)
			}
		}
		return true, ""
	})
	t.Logf("poison: both poison tasks dead %v after the check began (grace %v)", time.Since(deadStart).Round(time.Millisecond), grace)
	dead, err := api.ListDead(t.Context(), 100)
	if err != nil {
		t.Fatalf("list dead: %v", err)
	}
	listed := map[string]bool{}
	for _, d := range dead {
		listed[d.ID] = true
	}
	for id := range poisonIDs {
		if !listed[id] {
			t.Errorf("dead task %s is not listed by GET /v1/dead (%d listed)", id, len(dead))
		}
	}
	for _, id := range withPoison {
		if listed[id] {
			t.Errorf("ordinary task %s is listed dead", id)
		}
	}

	// The cause fixed, a redrive fires them.
	createTopic(t, admin, missing)
	setTopicMaxMessageBytes(t, admin, "dq.tasks", 1<<20)
	kmissing := watchKafka(t, c, missing)
	for id := range poisonIDs {
		if _, err := api.Redrive(t.Context(), id); err != nil {
			t.Fatalf("redrive %s: %v", id, err)
		}
	}
	kmissing.waitRecords(t, []string{"pois-topic"}, 30*time.Second)
	rec.waitDone(t, []string{"pois-large"}, 30*time.Second)
	waitState(t, api, []string{"pois-large"}, "succeeded", 10*time.Second)
}

// scenarioDeadTopicMissing: with no dead-letter topic, tasks that fail
// for good (the webhook answers 400) are still dead in Redis and listed
// by GET /v1/dead soon after their last attempt: the dead-letter record
// is a notification, not the record of truth.
func scenarioDeadTopicMissing(t *testing.T, p Provisioner) {
	rec := newRecorder(func(d delivery) (int, time.Duration) {
		if d.Type == "it.fail" {
			return http.StatusBadRequest, 0
		}
		return http.StatusOK, 0
	})
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec})
	deleteTopic(t, kafkaAdmin(t, c), "dq.dead")
	api := newAPI(c, 0)
	tasks := spread("nodl", "it.fail", 40, time.Now().Add(time.Second), 25*time.Millisecond)
	for i := range tasks {
		tasks[i].MaxAttempts = 1
	}
	want := scheduleBatch(t, api, tasks)
	ids := keys(want)
	listedAt := map[string]time.Time{}
	waitFor(t, 60*time.Second, "every failed task listed dead", func() (bool, string) {
		dead, err := api.ListDead(t.Context(), 1000)
		if err != nil {
			return false, err.Error()
		}
		now := time.Now()
		for _, d := range dead {
			if _, ok := listedAt[d.ID]; !ok {
				listedAt[d.ID] = now
			}
		}
		n := 0
		for _, id := range ids {
			if _, ok := listedAt[id]; ok {
				n++
			}
		}
		return n == len(ids), fmt.Sprintf("%d of %d listed", n, len(ids))
	})
	all, _ := rec.snapshot()
	lastAttempt := map[string]time.Time{}
	for _, d := range all {
		if d.At.After(lastAttempt[d.ID]) {
			lastAttempt[d.ID] = d.At
		}
	}
	var waits []time.Duration
	for _, id := range ids {
		la, ok := lastAttempt[id]
		if !ok {
			t.Errorf("task %s listed dead without any attempt", id)
			continue
		}
		waits = append(waits, listedAt[id].Sub(la))
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		t.Logf("dead topic missing: %d tasks listed dead; last attempt → listed (poll of the dead list, ~20 ms resolution): p50 %v, max %v",
			len(waits), waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
		// Within a second by design; the bound leaves room for a loaded CI
		// machine without letting the old behaviour (never listed) pass.
		if slowest := waits[len(waits)-1]; slowest > 5*time.Second {
			t.Errorf("a failed task was listed dead %v after its last attempt, want within a second or two", slowest)
		}
	}
}
