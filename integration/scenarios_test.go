package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/client"
)

// scenario is one end-to-end story, written once for every provisioner.
type scenario struct {
	name string
	run  func(t *testing.T, p Provisioner)
}

// scenarios run in both tiers.
var scenarios = []scenario{
	{"delivery", scenarioDelivery},
	{"cancel_reschedule", scenarioCancelReschedule},
	{"leader_failover", scenarioLeaderFailover},
	{"worker_crash", scenarioWorkerCrash},
	{"redis_down_compensation", scenarioCompensation},
	{"rate_limit", scenarioRateLimit},
	{"poison_tasks", scenarioPoison},
	{"dead_topic_missing", scenarioDeadTopicMissing},
	{"grow_shards", scenarioGrow},
}

// localOnly run in the process tier alone: the kill variant of the growth
// (the container tier runs the growth itself; a second 50-second run of it
// there adds CI time and Docker load, not coverage).
var localOnly = []scenario{
	{"grow_shards_kill", scenarioGrowKill},
}

// containerOnly need what only containers give: a network to cut.
var containerOnly = []scenario{
	{"event_partition", scenarioPartition},
}

// TestLocal runs the scenarios against child processes. It runs in
// parallel with TestContainers: one mostly waits for the Docker engine.
func TestLocal(t *testing.T) {
	t.Parallel()
	for _, s := range append(slices.Clone(scenarios), localOnly...) {
		t.Run(s.name, func(t *testing.T) { s.run(t, localProvisioner{}) })
	}
}

// containerSlots bounds the container scenarios running at once, of
// TestContainers and TestContainersSecure together.
var containerSlots = make(chan struct{}, 2)

// TestContainers runs the scenarios, and the partition scenario, against
// containers of the images built from this tree.
//
// Two scenarios run at a time: most of their time is spent waiting for
// the Docker engine to create and remove containers and for tasks to fall
// due, and more at once overload the engine (removals then take tens of
// seconds).
func TestContainers(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	for _, s := range append(slices.Clone(scenarios), containerOnly...) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			containerSlots <- struct{}{}
			// Registered first, so it runs last: after the scenario's
			// containers and networks are gone.
			t.Cleanup(func() { <-containerSlots })
			s.run(t, containerProvisioner{})
		})
	}
}

// hc reaches the binaries' HTTP ports, https ones included (it trusts the
// secured tier's CA).
var hc = &http.Client{Timeout: 3 * time.Second, Transport: trusting()}

// expected is what the test knows about a task it scheduled.
type expected struct {
	typ     string
	payload []byte // the payload as the webhook and Kafka must carry it
	key     string // Kafka key
	due     time.Time
	headers map[string]string
}

// scheduleBatch schedules tasks through the batch API and requires every
// one created and scheduled; it returns the expectations by id.
func scheduleBatch(t *testing.T, api *client.Client, tasks []client.Task) map[string]expected {
	t.Helper()
	res, err := api.ScheduleBatch(t.Context(), tasks)
	if err != nil {
		t.Fatalf("schedule batch of %d: %v", len(tasks), err)
	}
	out := map[string]expected{}
	for i, r := range res {
		if r.Err != nil || r.State != "scheduled" {
			t.Fatalf("batch item %d (%s): state %q, error %v", i, tasks[i].ID, r.State, r.Err)
		}
		out[r.ID] = expectOf(tasks[i], r.Result)
	}
	return out
}

func expectOf(task client.Task, r client.Result) expected {
	e := expected{typ: task.Type, payload: task.Payload, key: task.Key, due: r.DueAt, headers: task.Headers}
	if task.PayloadBytes != nil {
		e.payload = task.PayloadBytes
	}
	if e.key == "" {
		e.key = r.ID
	}
	return e
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// spread returns n tasks of type typ due from first, step apart.
func spread(prefix, typ string, n int, first time.Time, step time.Duration) []client.Task {
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{
			ID:      fmt.Sprintf("%s-%04d", prefix, i),
			Type:    typ,
			Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)),
			DueAt:   first.Add(time.Duration(i) * step).Truncate(time.Millisecond),
		}
	}
	return tasks
}

// checkNeverEarly fails for any delivery that arrived before its due time
// (1 ms of slack: due times have millisecond precision).
func checkNeverEarly(t *testing.T, rec *recorder) {
	t.Helper()
	all, _ := rec.snapshot()
	for _, d := range all {
		if !d.DueAt.IsZero() && d.At.Before(d.DueAt.Add(-time.Millisecond)) {
			t.Errorf("task %s delivered %v before its due time %s", d.ID, d.DueAt.Sub(d.At), d.DueAt.Format(time.RFC3339Nano))
		}
	}
}

// checkRecords verifies the pinned Kafka record contract for each task.
func checkRecords(t *testing.T, kl *kafkaLog, want map[string]expected) []*kgo.Record {
	t.Helper()
	var all []*kgo.Record
	for _, id := range keys(want) {
		w := want[id]
		recs := kl.records(id)
		if len(recs) == 0 {
			t.Errorf("task %s: no Kafka record", id)
			continue
		}
		all = append(all, recs...)
		for _, r := range recs {
			if r.Topic != "dq.tasks" {
				t.Errorf("task %s: topic %q, want dq.tasks", id, r.Topic)
			}
			if !bytes.Equal(r.Value, w.payload) {
				t.Errorf("task %s: value %q, want the payload %q unchanged", id, r.Value, w.payload)
			}
			if string(r.Key) != w.key {
				t.Errorf("task %s: key %q, want %q", id, r.Key, w.key)
			}
			if got := header(r, "dq-type"); got != w.typ {
				t.Errorf("task %s: dq-type %q, want %q", id, got, w.typ)
			}
			due, ok := headerMillis(r, "dq-due-at")
			if !ok || !due.Equal(w.due.Truncate(time.Millisecond)) {
				t.Errorf("task %s: dq-due-at %q, want %d", id, header(r, "dq-due-at"), w.due.UnixMilli())
			}
			if fired, ok := headerMillis(r, "dq-fired-at"); !ok || fired.Before(due) {
				t.Errorf("task %s: dq-fired-at %q not at or after dq-due-at %q (fired early or missing)", id, header(r, "dq-fired-at"), header(r, "dq-due-at"))
			}
			if a, err := strconv.Atoi(header(r, "dq-attempt")); err != nil || a < 1 {
				t.Errorf("task %s: dq-attempt %q", id, header(r, "dq-attempt"))
			}
			if _, err := strconv.ParseUint(header(r, "dq-gen"), 10, 64); err != nil {
				t.Errorf("task %s: dq-gen %q", id, header(r, "dq-gen"))
			}
			for k, v := range w.headers {
				if got := header(r, k); got != v {
					t.Errorf("task %s: header %s = %q, want %q", id, k, got, v)
				}
			}
		}
	}
	return all
}

// duplicates counts ids with more than one record, and more than one
// completed webhook delivery.
func duplicates(kl *kafkaLog, rec *recorder, ids []string) (kafka, webhook int) {
	done := rec.done()
	for _, id := range ids {
		if len(kl.records(id)) > 1 {
			kafka++
		}
		if len(done[id]) > 1 {
			webhook++
		}
	}
	return kafka, webhook
}

// sessionsLost names the event processes whose etcd session ended during
// the scenario (delayq_etcd_sessions_total above 1), or "" when none did.
// Nothing has to be killed for that: on a loaded CI box a process or the
// etcd server can miss a 2 s session's keep-alives (seen once, with firing
// lag p99 at 12 s). The shard's next leader then adopts the takes the old
// one had not settled and fires them again - at least once, as
// docs/reliability.md promises - so a scenario that counts duplicates as a
// defect "without any fault" must know whether this fault happened.
func sessionsLost(c Cluster, events int) string {
	var lost []string
	for i := range events {
		if v, ok := metric(hc, c.AdminURL(Event, i), "delayq_etcd_sessions_total"); ok && v > 1 {
			lost = append(lost, fmt.Sprintf("event %d had %v etcd sessions", i, v))
		}
	}
	return strings.Join(lost, ", ")
}

// unexplainedDuplicates counts the ids among ids with more than one Kafka
// record and returns those whose copies do not look like a failover's
// re-fire. When a session was lost (lost != ""), a copy fired again by the
// shard's next leader carries the same dq-shard and another dq-token; any
// other duplicate (two shards, as a faulty move would make, or one
// leadership firing twice) stays a defect. Without a lost session every
// duplicate is one.
func unexplainedDuplicates(kl *kafkaLog, ids []string, lost string) (dups int, out []string) {
	for _, id := range ids {
		recs := kl.records(id)
		if len(recs) < 2 {
			continue
		}
		dups++
		shards, tokens := map[string]bool{}, map[string]bool{}
		for _, r := range recs {
			shards[header(r, "dq-shard")] = true
			tokens[header(r, "dq-token")] = true
		}
		if lost == "" || len(shards) != 1 || len(tokens) < 2 {
			out = append(out, id)
		}
	}
	return dups, out
}

// describeCopies lists each Kafka copy of id: when it was fired, by which
// shard and leadership, and its generation.
func describeCopies(kl *kafkaLog, id string) string {
	var copies []string
	for _, r := range kl.records(id) {
		copies = append(copies, fmt.Sprintf("{record at %s, dq-fired-at %s, dq-shard %s, dq-token %s, dq-gen %s}",
			r.Timestamp.UTC().Format("15:04:05.000"), header(r, "dq-fired-at"), header(r, "dq-shard"), header(r, "dq-token"), header(r, "dq-gen")))
	}
	return strings.Join(copies, " ")
}

// checkDuplicates fails the test for every Kafka duplicate among ids that a
// lost etcd session does not explain (see unexplainedDuplicates), naming
// why; what it allows it logs. what names the scenario's promise.
func checkDuplicates(t *testing.T, c Cluster, events int, kl *kafkaLog, ids []string, what string) {
	t.Helper()
	lost := sessionsLost(c, events)
	dups, bad := unexplainedDuplicates(kl, ids, lost)
	for i, id := range bad {
		if i == 5 {
			t.Errorf("... and %d more", len(bad)-5)
			break
		}
		t.Errorf("task %s produced to Kafka more than once %s; copies: %s", id, what, describeCopies(kl, id))
	}
	if len(bad) > 0 {
		t.Errorf("%d tasks produced to Kafka more than once %s (etcd sessions lost: %q)", len(bad), what, lost)
	}
	if lost != "" {
		t.Logf("an etcd session ran out during the scenario (%s): %d tasks fired again by the shard's next leader, each from one shard under a new token (at least once)", lost, dups-len(bad))
	}
}

// scenarioDelivery: tasks scheduled through both APIs fire at their due
// time — never before — into Kafka under the record contract, and reach
// the webhook once with their payload unchanged; their state ends
// succeeded.
func scenarioDelivery(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 2, Workers: 2, Webhook: rec})
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)
	start := time.Now()

	// 100 tasks through the batch API, due over 1 s; payloads with
	// spacing and HTML characters that must arrive byte for byte.
	tasks := spread("del", "it.delivery", 100, start.Add(time.Second), 10*time.Millisecond)
	for i := range tasks {
		tasks[i].Payload = json.RawMessage(fmt.Sprintf(`{ "n" : %d, "html": "<&>" }`, i))
	}
	want := scheduleBatch(t, api, tasks)

	// Through the single API: a binary payload with its own key and
	// header, after a delay; and one due now.
	single := []client.Task{
		{ID: "del-binary", Type: "it.delivery.binary", PayloadBytes: []byte{0, 1, 2, 0xff}, Key: "key-1",
			Headers: map[string]string{"x-trace": "abc"}, Delay: 1500 * time.Millisecond},
		{ID: "del-now", Type: "it.delivery", Payload: json.RawMessage(`[1,2,3]`)},
	}
	for _, task := range single {
		r, err := api.Schedule(t.Context(), task)
		if err != nil || r.State != "scheduled" || r.Outcome != "created" {
			t.Fatalf("schedule %s: %+v, %v", task.ID, r, err)
		}
		want[r.ID] = expectOf(task, r)
	}
	ids := keys(want)

	rec.waitDone(t, ids, 30*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	kl.waitRecords(t, ids, 10*time.Second)

	checkNeverEarly(t, rec)
	done := rec.done()
	for _, id := range ids {
		w := want[id]
		ds := done[id]
		if len(ds) != 1 {
			t.Errorf("task %s: %d completed webhook deliveries, want exactly 1 (no faults in this scenario)", id, len(ds))
			continue
		}
		d := ds[0]
		if !bytes.Equal(d.Body, w.payload) || d.Type != w.typ || d.Attempt != 1 || d.Gen == "" {
			t.Errorf("task %s: webhook got type %q attempt %d gen %q body %q; want type %q attempt 1, body %q",
				id, d.Type, d.Attempt, d.Gen, d.Body, w.typ, w.payload)
		}
	}
	recs := checkRecords(t, kl, want)
	checkDuplicates(t, c, 2, kl, ids, "without any fault")
	_, wd := duplicates(kl, rec, ids)
	checkConsoleReads(t, api, len(ids))
	t.Logf("delivery: %d tasks; %s; webhook duplicates %d", len(ids), lagStats(recs), wd)
}

// checkConsoleReads: the console's read endpoints answer over the real
// daemon (in the secure tier as the least-privileged Redis ACL user of
// dq acl, whose command list must cover their Go-side calls too) and
// count the n tasks the scenario saw succeed.
func checkConsoleReads(t *testing.T, api *client.Client, n int) {
	t.Helper()
	ctx := t.Context()
	counts, err := api.Counts(ctx)
	if err != nil || counts.Totals.Succeeded != int64(n) {
		t.Errorf("GET /v1/counts: %+v %v, want %d succeeded", counts, err, n)
	}
	if _, err := api.Load(ctx, client.LoadOptions{Horizon: time.Hour, Step: 5 * time.Minute}); err != nil {
		t.Errorf("GET /v1/load: %v", err)
	}
	h, err := api.History(ctx, time.Hour, time.Minute)
	var succeeded int64
	if err == nil {
		for _, p := range h.Points {
			succeeded += p.Succeeded
		}
	}
	if err != nil || succeeded != int64(n) {
		t.Errorf("GET /v1/history: %d succeeded in the last hour, %v; want %d", succeeded, err, n)
	}
	page, err := api.SearchTasks(ctx, "del-", 1000, "")
	found := 0
	for page != nil && err == nil {
		found += len(page.Tasks)
		if page.Cursor == "" {
			break
		}
		page, err = api.SearchTasks(ctx, "del-", 1000, page.Cursor)
	}
	if err != nil || found != n {
		t.Errorf("GET /v1/search?prefix=del-: %d found, %v; want %d", found, err, n)
	}
	if _, err := api.InFlight(ctx, 10); err != nil {
		t.Errorf("GET /v1/inflight: %v", err)
	}
}

// scenarioCancelReschedule: a cancelled task never fires; a task moved
// earlier fires at its new time, well before the old one; a task moved
// later does not fire at its old time; an identical re-submit is a no-op
// and a changed one an upsert; a fired task can no longer be moved or
// cancelled (409).
func scenarioCancelReschedule(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec})
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)
	ctx := t.Context()
	now := time.Now()
	sched := func(id string, due time.Time, payload string) client.Result {
		t.Helper()
		r, err := api.Schedule(ctx, client.Task{ID: id, Type: "it.cr", DueAt: due, Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatalf("schedule %s: %v", id, err)
		}
		return r
	}

	cancelled := sched("cr-cancel", now.Add(3*time.Second), `{}`)
	if err := api.Cancel(ctx, cancelled.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if ti, err := api.Get(ctx, cancelled.ID); err != nil || ti.State != "cancelled" {
		t.Fatalf("get cancelled task: %+v, %v", ti, err)
	}

	earlierOld := now.Add(6 * time.Second)
	earlier := sched("cr-earlier", earlierOld, `{}`)
	earlierDue, err := api.RescheduleIn(ctx, earlier.ID, time.Second)
	if err != nil {
		t.Fatalf("reschedule earlier: %v", err)
	}

	later := sched("cr-later", now.Add(time.Second), `{}`)
	laterDue, err := api.Reschedule(ctx, later.ID, now.Add(4*time.Second))
	if err != nil {
		t.Fatalf("reschedule later: %v", err)
	}

	fired := sched("cr-fired", now.Add(500*time.Millisecond), `{}`)

	up := sched("cr-upsert", now.Add(2*time.Second), `{"v":1}`)
	if again := sched(up.ID, now.Add(2*time.Second), `{"v":1}`); again.Outcome != "unchanged" {
		t.Errorf("identical re-submit: outcome %q, want unchanged", again.Outcome)
	}
	if changed := sched(up.ID, now.Add(2*time.Second), `{"v":2}`); changed.Outcome != "updated" {
		t.Errorf("changed re-submit: outcome %q, want updated", changed.Outcome)
	}

	ids := []string{earlier.ID, later.ID, fired.ID, up.ID}
	rec.waitDone(t, ids, 30*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	checkNeverEarly(t, rec)
	done := rec.done()
	if d := done[earlier.ID][0]; d.At.Before(earlierDue) || !d.At.Before(earlierOld) {
		t.Errorf("task moved earlier: delivered at %s, want between its new due %s and its old due %s",
			d.At.Format(time.RFC3339Nano), earlierDue.Format(time.RFC3339Nano), earlierOld.Format(time.RFC3339Nano))
	}
	if d := done[later.ID][0]; d.At.Before(laterDue) {
		t.Errorf("task moved later: delivered at %s, before its new due %s", d.At.Format(time.RFC3339Nano), laterDue.Format(time.RFC3339Nano))
	}
	if ds := done[up.ID]; len(ds) != 1 || string(ds[0].Body) != `{"v":2}` {
		t.Errorf("upserted task: deliveries %+v, want one with the new payload", ds)
	}
	if err := api.Cancel(ctx, fired.ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("cancel a succeeded task: %v, want 409 conflict", err)
	}
	if _, err := api.RescheduleIn(ctx, fired.ID, time.Minute); !errors.Is(err, client.ErrConflict) {
		t.Errorf("reschedule a succeeded task: %v, want 409 conflict", err)
	}
	// The cancelled task was due 3 s in; the task moved to 4 s has been
	// delivered, so the cancelled one would have fired by now.
	if n := len(kl.records(cancelled.ID)); n > 0 || len(done[cancelled.ID]) > 0 {
		t.Errorf("cancelled task fired: %d Kafka records, %d deliveries", n, len(done[cancelled.ID]))
	}
	if ti, err := api.Get(ctx, cancelled.ID); err != nil || ti.State != "cancelled" {
		t.Errorf("cancelled task: %+v, %v", ti, err)
	}
}

// scenarioLeaderFailover: SIGKILL of an event process while tasks fall
// due: the survivor takes over its shards within the etcd session TTL and
// every task is delivered; the restarted process gets shards back.
func scenarioLeaderFailover(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 2, Workers: 1, Webhook: rec})
	waitBalanced(t, hc, c, 2, []int{0, 1}, 30*time.Second)
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)

	want := scheduleBatch(t, api, spread("fo", "it.failover", 200, time.Now().Add(time.Second), 30*time.Millisecond))
	ids := keys(want)
	waitFor(t, 20*time.Second, "a fifth of the tasks delivered before the kill", func() (bool, string) {
		n := len(rec.done())
		return n >= 40, fmt.Sprintf("%d delivered", n)
	})
	led := shardsLed(hc, c, 2)
	c.Kill(t, Event, 0)
	killed := time.Now()
	waitFor(t, 20*time.Second, "the surviving event process leads every shard", func() (bool, string) {
		l := shardsLed(hc, c, 2)
		return l[1] == c.Shards(), fmt.Sprintf("event 1 leads %d of %d", l[1], c.Shards())
	})
	takeover := time.Since(killed)

	rec.waitDone(t, ids, 40*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	kl.waitRecords(t, ids, 10*time.Second)
	checkNeverEarly(t, rec)
	recs := checkRecords(t, kl, want)
	kd, wd := duplicates(kl, rec, ids)
	t.Logf("failover: shards led before the kill %v; survivor led all %d shards %v after SIGKILL; %d tasks, none lost; "+
		"%d produced twice (at-least-once), %d delivered twice; %s", led, c.Shards(), takeover.Round(time.Millisecond), len(ids), kd, wd, lagStats(recs))

	// The restarted process takes its fair share back and fires.
	c.Start(t, Event, 0)
	waitBalanced(t, hc, c, 2, []int{0, 1}, 30*time.Second)
	more := scheduleBatch(t, api, spread("fo-after", "it.failover", 20, time.Now().Add(300*time.Millisecond), 10*time.Millisecond))
	rec.waitDone(t, keys(more), 20*time.Second)
}

// scenarioWorkerCrash: SIGKILL of a work process while its handlers run:
// the interrupted tasks are run again by the other worker (after the
// consumer-group rebalance and the execution claims' expiry) and every
// task succeeds.
func scenarioWorkerCrash(t *testing.T, p Provisioner) {
	const work = time.Second
	rec := newRecorder(func(d delivery) (int, time.Duration) { return http.StatusOK, work })
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 2, Webhook: rec, Env: map[string]string{
		"DQ_KAFKA_SESSION_TIMEOUT": "6s", // kfake's minimum
		"DQ_CLAIM_MARGIN":          "1s",
		"DQ_WORK_CONCURRENCY":      "4",
	}})
	api := newAPI(c, 0)
	tasks := spread("wc", "it.slow", 32, time.Now().Add(500*time.Millisecond), time.Millisecond)
	for i := range tasks {
		tasks[i].Timeout = 4 * time.Second
	}
	want := scheduleBatch(t, api, tasks)
	ids := keys(want)

	// Kill a work process while a handler of its own has just started, so
	// that the kill cuts it: a kill timed by the total in flight could
	// land as the victim's handlers completed, and then cut nothing. The
	// victim is whichever process runs such a handler first: on a loaded
	// machine work 1 may hold every partition until all tasks are
	// claimed (work 0 joined the group late, or got only records that
	// work 1's claims hold), and then only work 1 ever runs a handler.
	victim := -1
	waitFor(t, 30*time.Second, "a work process running a handler that started less than 300ms ago", func() (bool, string) {
		var seen []string
		for i := range 2 {
			fresh := 0
			ds := rec.inflightFrom(strconv.Itoa(i))
			for _, d := range ds {
				if time.Since(d.At) < 300*time.Millisecond {
					fresh++
				}
			}
			if fresh > 0 {
				victim = i
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("work %d has %d in flight, %d started in the last 300ms", i, len(ds), fresh))
		}
		return false, strings.Join(seen, "; ")
	})
	c.Kill(t, Work, victim)
	rec.waitDone(t, ids, 90*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)

	all, _ := rec.snapshot()
	interrupted := 0
	for _, d := range all {
		if !d.Done {
			interrupted++
		}
	}
	if interrupted == 0 {
		t.Errorf("no handler was interrupted by the kill: the scenario did not test a crash")
	}
	_, wd := 0, 0
	for _, ds := range rec.done() {
		if len(ds) > 1 {
			wd++
		}
	}
	t.Logf("worker crash: work %d killed; %d tasks succeeded; %d deliveries cut by the kill and run again; %d tasks ran to completion twice", victim, len(ids), interrupted, wd)
}

// scenarioCompensation: with Redis down the daemon journals accepted
// tasks (202 journaled), keeps them across its own crash, and writes them
// once Redis is back; event and work ride out the outage; every task is
// delivered.
func scenarioCompensation(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec})
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)

	c.StopRedis(t)
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("comp-single-%02d", i)
		r, err := api.Schedule(t.Context(), client.Task{ID: id, Type: "it.comp", Payload: json.RawMessage(`{}`), Delay: time.Second})
		if err != nil || !r.Journaled() {
			t.Fatalf("schedule %s with Redis down: %+v, %v; want journaled", id, r, err)
		}
		ids = append(ids, id)
	}
	res, err := api.ScheduleBatch(t.Context(), spread("comp-batch", "it.comp", 10, time.Now().Add(time.Second), time.Millisecond))
	if err != nil {
		t.Fatalf("batch with Redis down: %v", err)
	}
	for _, r := range res {
		if r.Err != nil || !r.Journaled() {
			t.Fatalf("batch item %s with Redis down: %+v, %v; want journaled", r.ID, r.Result, r.Err)
		}
		ids = append(ids, r.ID)
	}

	// The daemon crashes with a full journal and comes back while Redis
	// is still down.
	c.Kill(t, Daemon, 0)
	c.Start(t, Daemon, 0)
	api = newAPI(c, 0)
	r, err := api.Schedule(t.Context(), client.Task{ID: "comp-after-restart", Type: "it.comp", Payload: json.RawMessage(`{}`)})
	if err != nil || !r.Journaled() {
		t.Fatalf("schedule after the daemon restart with Redis down: %+v, %v; want journaled", r, err)
	}
	ids = append(ids, r.ID)

	c.StartRedis(t)
	rec.waitDone(t, ids, 60*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	kl.waitRecords(t, ids, 10*time.Second)
	checkDuplicates(t, c, 1, kl, ids, "after the journal's replay (the replay is not idempotent)")
	_, wd := duplicates(kl, rec, ids)
	t.Logf("compensation: %d tasks accepted while Redis was down (daemon killed and restarted in between), all delivered; webhook duplicates %d", len(ids), wd)
}

// scenarioPartition: an event container cut off the network (docker
// network disconnect) loses its etcd session, leads no shard and fires
// nothing more; the other event container takes all shards and every task
// is delivered; reconnected, the two share the shards again.
func scenarioPartition(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 2, Workers: 1, Webhook: rec})
	waitBalanced(t, hc, c, 2, []int{0, 1}, 30*time.Second)
	kl := watchKafka(t, c, "dq.tasks")
	api := newAPI(c, 0)

	want := scheduleBatch(t, api, spread("part", "it.partition", 150, time.Now().Add(time.Second), 40*time.Millisecond))
	ids := keys(want)
	waitFor(t, 20*time.Second, "some tasks delivered before the partition", func() (bool, string) {
		n := len(rec.done())
		return n >= 20, fmt.Sprintf("%d delivered", n)
	})
	before := shardsLed(hc, c, 2)
	c.Disconnect(t, Event, 0)
	cut := time.Now()
	waitFor(t, 30*time.Second, "the cut-off event leads nothing and the other leads every shard", func() (bool, string) {
		l := shardsLed(hc, c, 2)
		return l[0] == 0 && l[1] == c.Shards(), fmt.Sprintf("shards led %v", l)
	})
	moved := time.Since(cut)
	firedAtStepDown, ok := metric(hc, c.AdminURL(Event, 0), "delayq_fired_total")
	if !ok {
		t.Fatalf("read delayq_fired_total of the cut-off event")
	}

	rec.waitDone(t, ids, 40*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	firedAtEnd, _ := metric(hc, c.AdminURL(Event, 0), "delayq_fired_total")
	if firedAtEnd != firedAtStepDown {
		t.Errorf("the cut-off event fired %v tasks after it stepped down", firedAtEnd-firedAtStepDown)
	}
	kl.waitRecords(t, ids, 10*time.Second)
	checkNeverEarly(t, rec)
	recs := checkRecords(t, kl, want)
	kd, wd := duplicates(kl, rec, ids)
	t.Logf("partition: shards led before %v; %v after the cut the cut-off event led none and the other all %d; "+
		"it fired nothing more; %d tasks, none lost, %d produced twice, %d delivered twice; %s",
		before, moved.Round(time.Millisecond), c.Shards(), len(ids), kd, wd, lagStats(recs))

	c.Reconnect(t, Event, 0)
	waitBalanced(t, hc, c, 2, []int{0, 1}, 30*time.Second)
	more := scheduleBatch(t, api, spread("part-after", "it.partition", 20, time.Now().Add(300*time.Millisecond), 10*time.Millisecond))
	rec.waitDone(t, keys(more), 20*time.Second)
}

// scenarioRateLimit: a window quota set through the daemon's limits API
// (rules in etcd, watched by every worker) holds across two workers: 30
// tasks of the limited type due at once run at most 10 per 2 s window —
// so they spread over at least three windows — and none is dropped; a
// type without rules, due at the same moment, is not held back.
func scenarioRateLimit(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 2, Webhook: rec})
	api := newAPI(c, 0)
	putLimit(t, c.DaemonURL(0), "it.limited", `{"window_quota":{"limit":10,"window":"2s"}}`)

	// Rules reach the workers within a second; the tasks fall due 2 s
	// after the rule was stored.
	due := time.Now().Add(2 * time.Second)
	limited := scheduleBatch(t, api, spread("rl-limited", "it.limited", 30, due, 0))
	free := scheduleBatch(t, api, spread("rl-free", "it.free", 10, due, 0))
	rec.waitDone(t, keys(free), 20*time.Second)
	rec.waitDone(t, keys(limited), 60*time.Second)
	waitState(t, api, append(keys(limited), keys(free)...), "succeeded", 20*time.Second)
	checkNeverEarly(t, rec)

	span := func(ids []string) (first, last time.Time) {
		done := rec.done()
		for _, id := range ids {
			for _, d := range done[id] {
				if first.IsZero() || d.At.Before(first) {
					first = d.At
				}
				if d.At.After(last) {
					last = d.At
				}
			}
		}
		return first, last
	}
	lf, ll := span(keys(limited))
	ff, fl := span(keys(free))
	// 30 tasks at 10 per window need three windows: the first and the
	// last delivery are more than one whole window apart.
	if ll.Sub(lf) < 2*time.Second {
		t.Errorf("the limited type's 30 tasks were delivered within %v: the quota of 10 per 2s did not hold", ll.Sub(lf))
	}
	if fl.Sub(due) > 2*time.Second {
		t.Errorf("the type without rules finished %v after its due time: held back by its neighbour's limit", fl.Sub(due))
	}
	t.Logf("rate limit: 30 tasks at 10 per 2s delivered over %v (first %v after due); 10 unlimited tasks over %v",
		ll.Sub(lf).Round(time.Millisecond), lf.Sub(due).Round(time.Millisecond), fl.Sub(ff).Round(time.Millisecond))
}

// putLimit stores a rate-limit rule through the daemon's API.
func putLimit(t *testing.T, base, typ, rule string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/limits/"+typ, strings.NewReader(rule))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("PUT /v1/limits/%s: %v", typ, err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/limits/%s: %s %s", typ, resp.Status, b)
	}
}
