package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// delayq as a pure Kafka bridge (issue #41), end to end on the real
// binaries: a task whose topic no delayq work process handles (no work
// process declared it worked in etcd) ends "delivered" once Kafka
// acknowledged its record, with a fire receipt that names where Kafka put
// it; delivered tasks are purged after DQ_RETENTION like succeeded ones; a
// worker that arrives later still runs the delivered tasks of its topic,
// and from then on the tasks of that topic go fired -> succeeded, never
// delivered.

const (
	// bridgeTasks fall due over bridgeSpan in the first part, half to
	// dq.tasks (the default topic), half to bridgeOther.
	bridgeTasks = 2000
	bridgeSpan  = 10 * time.Second
	bridgeOther = "bridge.other"
	// bridgeRetention is DQ_RETENTION of the first part: long enough to
	// read every receipt, list the delivered tasks and see the growth
	// settle before the first purge, short enough for the test.
	bridgeRetention = 30 * time.Second
)

// TestBridge runs both parts on the process tier, each on its own cluster.
func TestBridge(t *testing.T) {
	t.Parallel()
	t.Run("no_worker", func(t *testing.T) {
		t.Parallel()
		bridgeNoWorker(t)
	})
	t.Run("worker_later", func(t *testing.T) {
		t.Parallel()
		bridgeWorkerLater(t)
	})
}

// bridgeNoWorker: no work process at all, two topics, the shard map grown
// 16 -> 64 while the tasks fall due. Every task ends delivered with a
// receipt equal to where an independent consumer read its record; after
// the retention every GET answers 404.
func bridgeNoWorker(t *testing.T) {
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 2, Workers: 0, Env: map[string]string{
		"DQ_SHARDS": "16", "DQ_REDIS_TIMEOUT": "5s", // as the growth scenario
		"DQ_RETENTION": bridgeRetention.String(),
		// a shard's take purges expired records once every 8 takes: an
		// idle shard takes every DQ_IDLE_POLL (5s by default: 40s)
		"DQ_IDLE_POLL": "500ms",
	}})
	lc := c.(*localCluster)
	lc.kafka.CreateTopic(t, bridgeOther, 4)
	logs := map[string]*kafkaLog{"dq.tasks": watchKafka(t, c, "dq.tasks"), bridgeOther: watchKafka(t, c, bridgeOther)}
	api := newAPI(c, 0)
	ctx := t.Context()
	if w := workedTopics(t, c); len(w) != 0 {
		t.Fatalf("worked topics with no work process: %v", w)
	}

	// due over 10 s from 5 s on; odd tasks to the other topic, even ones
	// to the default topic (no topic named)
	n := bridgeTasks
	start := time.Now().Add(5 * time.Second)
	tasks := spread("bridge", "it.bridge", n, start, bridgeSpan/time.Duration(n))
	topic := map[string]string{}
	for i := range tasks {
		topic[tasks[i].ID] = "dq.tasks"
		if i%2 == 1 {
			tasks[i].Topic = bridgeOther
			topic[tasks[i].ID] = bridgeOther
		}
	}
	want := map[string]expected{}
	for i := 0; i < n; i += 1000 {
		for id, e := range scheduleBatch(t, api, tasks[i:min(i+1000, n)]) {
			want[id] = e
		}
	}
	ids := keys(want)
	if m, err := api.Shards(ctx); err != nil || m.Count != 16 || m.State != "stable" {
		t.Fatalf("shard map before: %+v, %v", m, err)
	}

	// 2 s into the firing: grow to 64
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	grown, err := api.GrowShards(ctx, 64)
	if err != nil || grown.Count != 64 || grown.Previous != 16 || grown.State != "migrating" {
		t.Fatalf("grow to 64: %+v, %v", grown, err)
	}
	grewAt := time.Now()

	// every record in Kafka, then every task delivered: its receipt is
	// read the moment it is seen delivered (before any purge)
	for tp, kl := range logs {
		var of []string
		for _, id := range ids {
			if topic[id] == tp {
				of = append(of, id)
			}
		}
		kl.waitRecords(t, of, 90*time.Second)
	}
	infos := waitInfos(t, api, ids, client.StateDelivered, "", 60*time.Second)
	allDelivered := time.Now()

	var final *client.ShardMap
	waitFor(t, 60*time.Second, "the shard map stable at 64", func() (bool, string) {
		m, err := api.Shards(ctx)
		if err != nil {
			return false, err.Error()
		}
		final = m
		return m.State == "stable" && m.Count == 64, fmt.Sprintf("%+v", *m)
	})
	settled := time.Now()

	var lastFired time.Time
	late := make([]time.Duration, 0, n)
	for _, id := range ids {
		ti := infos[id]
		checkReceipt(t, ti, want[id], topic[id], logs[topic[id]])
		if ti.FiredAt.After(lastFired) {
			lastFired = ti.FiredAt
		}
		late = append(late, time.Duration(ti.LateMs)*time.Millisecond)
	}
	for tp, kl := range logs {
		var of []string
		for _, id := range ids {
			if topic[id] == tp {
				of = append(of, id)
			}
		}
		checkDuplicates(t, c, 2, kl, of, "without any crash (to "+tp+")")
	}

	// the delivered tasks are listed under ?state=delivered; one that is
	// not must be gone already (its retention ended while the test was
	// slow), never still readable
	listed := 0
	for lt, err := range api.Tasks(ctx, client.ListOptions{State: client.StateDelivered, Limit: 1000}) {
		if err != nil {
			t.Fatalf("list delivered tasks: %v", err)
		}
		if lt.State != client.StateDelivered {
			t.Errorf("listed under state=delivered: %s in state %s", lt.ID, lt.State)
		}
		if _, ok := want[lt.ID]; ok {
			listed++
			delete(infos, lt.ID) // seen: infos now holds the ones not listed
		}
	}
	for id := range infos {
		if _, err := api.Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delivered task %s not listed under state=delivered, and GET answers %v (want it listed, or 404 once purged)", id, err)
		}
	}

	delivered := 0.0
	for i := range 2 {
		v, _ := metric(hc, c.AdminURL(Event, i), "delayq_fire_delivered_total")
		delivered += v
	}
	if delivered < float64(n) {
		t.Errorf("delayq_fire_delivered_total of the event processes: %v, want at least %d", delivered, n)
	}

	// after the retention every task is gone: 404
	time.Sleep(time.Until(lastFired.Add(bridgeRetention)))
	pending := slices.Clone(ids)
	waitFor(t, 60*time.Second, fmt.Sprintf("all %d delivered tasks purged after the retention (GET 404)", n), func() (bool, string) {
		var still []string
		why := ""
		for _, id := range pending {
			if ti, err := api.Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
				still = append(still, id)
				if err != nil {
					why = id + ": " + err.Error()
				} else {
					why = id + " is " + ti.State
				}
			}
		}
		pending = still
		return len(pending) == 0, fmt.Sprintf("%d still readable (%s)", len(pending), why)
	})
	purged := time.Now()

	slices.Sort(late)
	t.Logf("bridge, no worker: %d tasks to 2 topics due over %v, all delivered %v after the last due time; "+
		"grown 16->64 %v after the first due time, settled %v after the PUT (moved %d); %d listed as delivered; "+
		"late_ms p50 %v p99 %v max %v; all purged %v after the last fire (retention %v)",
		n, bridgeSpan, allDelivered.Sub(want[ids[len(ids)-1]].due).Round(time.Millisecond),
		grewAt.Sub(start).Round(time.Millisecond), settled.Sub(grewAt).Round(time.Millisecond), final.Moved, listed,
		late[len(late)/2], late[len(late)*99/100], late[len(late)-1], purged.Sub(lastFired).Round(time.Millisecond), bridgeRetention)
}

// bridgeWorkerLater: the work process is not started at first, so that
// dq.tasks is not worked: 200 tasks end delivered. Then it starts: it
// reads the topic from the start, runs each of them once and they end
// succeeded with their receipt unchanged. The topic is worked from then
// on: 100 more tasks go fired -> succeeded, none delivered.
func bridgeWorkerLater(t *testing.T) {
	rec := newRecorder(nil)
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec, DeferWorkers: true,
		Env: map[string]string{"DQ_OUTCOMES_DELIVERED": "true"}})
	lc := c.(*localCluster)
	kl := watchKafka(t, c, "dq.tasks")
	outs := watchKafka(t, c, record.DefaultOutcomesTopic)
	api := newAPI(c, 0)
	if w := workedTopics(t, c); len(w) != 0 {
		t.Fatalf("worked topics before any work process started: %v", w)
	}

	early := scheduleBatch(t, api, spread("bridge-early", "it.bridge", 200, time.Now().Add(2*time.Second), time.Millisecond))
	eids := keys(early)
	kl.waitRecords(t, eids, 30*time.Second)
	before := waitInfos(t, api, eids, client.StateDelivered, "", 30*time.Second)
	deliveredAt := time.Now()
	for _, id := range eids {
		checkReceipt(t, before[id], early[id], "dq.tasks", kl)
	}
	// each one's "delivered" outcome record carries its receipt
	waitOutcomes(t, outs, eids, record.OutcomeDelivered)
	for _, id := range eids {
		for _, r := range outs.records(id) {
			if o := testenv.ParseOutcome(t, r); o.Outcome == record.OutcomeDelivered {
				if b := before[id]; o.Partition != b.Partition || o.Offset != b.Offset || !o.FiredAt.Equal(b.FiredAt) {
					t.Errorf("%s: delivered outcome at partition %d offset %d fired %s; the task's receipt says %d, %d, %s",
						id, o.Partition, o.Offset, o.FiredAt.Format(time.RFC3339Nano), b.Partition, b.Offset, b.FiredAt.Format(time.RFC3339Nano))
				}
			}
		}
	}
	deliveredBefore, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fire_delivered_total")
	if deliveredBefore < 200 {
		t.Errorf("delayq_fire_delivered_total %v after 200 tasks delivered", deliveredBefore)
	}

	// the worker arrives: it declares dq.tasks and runs the delivered tasks
	workerAt := time.Now()
	c.Start(t, Work, 0)
	waitFor(t, 20*time.Second, "dq.tasks declared worked", func() (bool, string) {
		w := workedTopics(t, c)
		return slices.Contains(w, "dq.tasks"), fmt.Sprintf("worked topics %v", w)
	})
	rec.waitDone(t, eids, 60*time.Second)
	ranAll := time.Now()
	after := waitInfos(t, api, eids, client.StateSucceeded, "", 30*time.Second)
	done := rec.done()
	for _, id := range eids {
		if len(done[id]) != 1 {
			t.Errorf("delivered task %s: %d completed webhook deliveries once the worker came, want exactly 1", id, len(done[id]))
		}
		b, a := before[id], after[id]
		if !a.HasReceipt() || a.Partition != b.Partition || a.Offset != b.Offset || !a.FiredAt.Equal(b.FiredAt) || a.LeaderToken != b.LeaderToken {
			t.Errorf("task %s: receipt when delivered {partition %d offset %d fired %s token %d}, when succeeded {partition %d offset %d fired %s token %d}: want it kept",
				id, b.Partition, b.Offset, b.FiredAt.Format(time.RFC3339Nano), b.LeaderToken, a.Partition, a.Offset, a.FiredAt.Format(time.RFC3339Nano), a.LeaderToken)
		}
	}

	// The event process must see the declaration before the next tasks
	// fire: its view logs each change of the worked topics.
	waitFor(t, 20*time.Second, "event 0's view of the worked topics holds dq.tasks", func() (bool, string) {
		for _, line := range strings.Split(lc.inst[Event][0].out.Tail(64<<10), "\n") {
			if strings.Contains(line, "worked topics changed") && strings.Contains(line, "worked_topics=1") {
				return true, ""
			}
		}
		return false, "no \"worked topics changed ... worked_topics=1\" in its log"
	})
	receipts0, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fire_receipts_total")
	delivered0, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fire_delivered_total")

	later := scheduleBatch(t, api, spread("bridge-later", "it.bridge", 100, time.Now().Add(time.Second), time.Millisecond))
	lids := keys(later)
	rec.waitDone(t, lids, 30*time.Second)
	kl.waitRecords(t, lids, 10*time.Second)
	linfos := waitInfos(t, api, lids, client.StateSucceeded, client.StateDelivered, 30*time.Second)
	done = rec.done()
	for _, id := range lids {
		checkReceipt(t, linfos[id], later[id], "dq.tasks", kl)
		if n := len(done[id]); n != 1 {
			t.Errorf("task %s: %d completed webhook deliveries, want 1", id, n)
		}
	}
	// every receipt of the later tasks stored (the settle that would have
	// made them delivered has run), none of them delivered
	waitFor(t, 10*time.Second, "the later tasks' receipts counted", func() (bool, string) {
		v, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fire_receipts_total")
		return v >= receipts0+100, fmt.Sprintf("delayq_fire_receipts_total %v, was %v", v, receipts0)
	})
	if v, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fire_delivered_total"); v != delivered0 {
		t.Errorf("delayq_fire_delivered_total went from %v to %v while the 100 later tasks fired to a worked topic", delivered0, v)
	}
	// the worker's "succeeded" outcome of each later task is out; none has
	// a "delivered" one
	waitOutcomes(t, outs, lids, record.OutcomeSucceeded)
	for _, id := range lids {
		for _, r := range outs.records(id) {
			if o := testenv.ParseOutcome(t, r); o.Outcome == record.OutcomeDelivered {
				t.Errorf("task %s fired to a worked topic has a delivered outcome record: %s", id, r.Value)
			}
		}
	}
	checkDuplicates(t, c, 1, kl, append(slices.Clone(eids), lids...), "without any fault")

	t.Logf("bridge, worker later: %d tasks delivered with no worker (all %v after the last due time); the worker started, ran them all %v later, "+
		"each once, receipts kept; %d more tasks fired to the worked topic went fired -> succeeded, none delivered",
		len(eids), deliveredAt.Sub(early[eids[len(eids)-1]].due).Round(time.Millisecond),
		ranAll.Sub(workerAt).Round(time.Millisecond), len(lids))
}

// checkReceipt checks the fire receipt ti carries against the record an
// independent consumer read from topic's log (kl): the same partition and
// offset, fired_at the record's timestamp and its dq-fired-at to the ms,
// the attempt and leader token of its headers, fired no earlier than due.
func checkReceipt(t *testing.T, ti *client.TaskInfo, w expected, topic string, kl *kafkaLog) {
	t.Helper()
	if !ti.HasReceipt() {
		t.Errorf("task %s (%s): no fire receipt", ti.ID, ti.State)
		return
	}
	var r *kgo.Record
	for _, c := range kl.records(ti.ID) {
		if c.Partition == ti.Partition && c.Offset == ti.Offset {
			r = c
		}
	}
	if r == nil {
		t.Errorf("task %s: receipt partition %d offset %d, but its records in %s are at %s", ti.ID, ti.Partition, ti.Offset, topic, placesOf(kl, ti.ID))
		return
	}
	if r.Topic != topic {
		t.Errorf("task %s: record in topic %s, want %s", ti.ID, r.Topic, topic)
	}
	fired, ok := headerMillis(r, "dq-fired-at")
	if !ok || ti.FiredAt.UnixMilli() != fired.UnixMilli() || ti.FiredAt.UnixMilli() != r.Timestamp.UnixMilli() {
		t.Errorf("task %s: fired_at %s; its record's timestamp %s, dq-fired-at %q: want all three the same ms",
			ti.ID, ti.FiredAt.Format(time.RFC3339Nano), r.Timestamp.Format(time.RFC3339Nano), header(r, "dq-fired-at"))
	}
	due := w.due.Truncate(time.Millisecond)
	if !ti.FiredDueAt.Equal(due) || ti.FiredAt.Before(due) {
		t.Errorf("task %s: fired_due_at %s, fired_at %s; want due %s, fired at or after it",
			ti.ID, ti.FiredDueAt.Format(time.RFC3339Nano), ti.FiredAt.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
	}
	if ti.LateMs < 0 || ti.LateMs != ti.FiredAt.Sub(ti.FiredDueAt).Milliseconds() {
		t.Errorf("task %s: late_ms %d, want fired_at - fired_due_at = %d", ti.ID, ti.LateMs, ti.FiredAt.Sub(ti.FiredDueAt).Milliseconds())
	}
	if a, _ := strconv.Atoi(header(r, "dq-attempt")); ti.FiredAttempt != a || a != 1 {
		t.Errorf("task %s: fired_attempt %d, record's dq-attempt %q, want 1", ti.ID, ti.FiredAttempt, header(r, "dq-attempt"))
	}
	if tok, err := strconv.ParseInt(header(r, "dq-token"), 10, 64); err != nil || ti.LeaderToken != tok || tok < 1 {
		t.Errorf("task %s: leader_token %d, record's dq-token %q", ti.ID, ti.LeaderToken, header(r, "dq-token"))
	}
}

// placesOf lists where id's records are (topic/partition@offset).
func placesOf(kl *kafkaLog, id string) string {
	var out []string
	for _, r := range kl.records(id) {
		out = append(out, fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// waitInfos waits until GET shows every id in state and returns what it
// showed then (read the moment each got there). A task seen in state
// forbid ("": none) fails the test.
func waitInfos(t *testing.T, api *client.Client, ids []string, state, forbid string, timeout time.Duration) map[string]*client.TaskInfo {
	t.Helper()
	out := map[string]*client.TaskInfo{}
	pending := slices.Clone(ids)
	seen := map[string]bool{} // reported in forbid
	waitFor(t, timeout, fmt.Sprintf("all %d tasks %s", len(ids), state), func() (bool, string) {
		got := getAll(t.Context(), api, pending)
		var still []string
		why := ""
		for i, id := range pending {
			g := got[i]
			switch {
			case g.err != nil:
				still, why = append(still, id), id+": "+g.err.Error()
			case g.ti.State == forbid && !seen[id]:
				seen[id] = true
				t.Errorf("task %s seen %s", id, forbid)
				still, why = append(still, id), id+" is "+g.ti.State
			case g.ti.State != state:
				still, why = append(still, id), id+" is "+g.ti.State
			default:
				out[id] = g.ti
			}
		}
		pending = still
		return len(pending) == 0, fmt.Sprintf("%d not yet (%s)", len(pending), why)
	})
	return out
}

type got struct {
	ti  *client.TaskInfo
	err error
}

// getAll GETs ids, four at a time.
func getAll(ctx context.Context, api *client.Client, ids []string) []got {
	out := make([]got, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range next {
				out[i].ti, out[i].err = api.Get(ctx, ids[i])
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// waitOutcomes waits until each id has an outcome record of outcome.
func waitOutcomes(t *testing.T, outs *kafkaLog, ids []string, outcome string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("a %s outcome record of each of %d tasks", outcome, len(ids)), func() (bool, string) {
		missing := 0
		for _, id := range ids {
			if !slices.ContainsFunc(outs.records(id), func(r *kgo.Record) bool {
				return testenv.ParseOutcome(t, r).Outcome == outcome
			}) {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d missing", missing)
	})
}

// workedTopics reads the worked topics from the daemon's GET /v1/cluster.
func workedTopics(t *testing.T, c Cluster) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.DaemonURL(0)+"/v1/cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/cluster: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		WorkedTopics []struct {
			Topic string `json:"topic"`
		} `json:"worked_topics"`
		EtcdError string `json:"etcd_error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.EtcdError != "" {
		t.Fatalf("GET /v1/cluster: %s, %v, etcd_error %q", resp.Status, err, body.EtcdError)
	}
	out := []string{}
	for _, w := range body.WorkedTopics {
		out = append(out, w.Topic)
	}
	return out
}
