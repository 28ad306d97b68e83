package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestCompensationAcrossRestart is the "Done when": Redis stops,
// tasks are submitted (202 journaled, several versions of the same ids),
// the daemon is replaced by a new one on the same journal while Redis is
// still down, Redis comes back, and every task is then in Redis exactly
// once with the content of its last submission.
func TestCompensationAcrossRestart(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app1 := startApp(t, cfg)
	if rp := app1.do("POST", "/v1/tasks", `{"id":"before","type":"x","delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("before the outage: %d %s", rp.Status, rp.Raw)
	}
	r.Kill(t)

	const ids, versions = 20, 3
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	body := func(i, v int) string {
		return fmt.Sprintf(`{"id":"c%d","type":"x","payload":{"id":%d, "version":%d},"due_at":"%s"}`,
			i, i, v, wire.FormatTime(base.Add(time.Duration(v*1000+i)*time.Millisecond)))
	}
	want := map[string]string{} // id -> payload of the last submission
	for v := 1; v <= versions; v++ {
		for i := range ids {
			if i%5 == 0 && v == versions {
				continue // sent in the batch below
			}
			rp := app1.do("POST", "/v1/tasks", body(i, v))
			if rp.Status != 202 || rp.str("state") != "journaled" || rp.str("outcome") != "journaled" {
				t.Fatalf("c%d v%d: %d %s", i, v, rp.Status, rp.Raw)
			}
			want[fmt.Sprintf("c%d", i)] = fmt.Sprintf(`{"id":%d, "version":%d}`, i, v)
		}
	}
	// A batch with two versions of the same ids, in order.
	var items []string
	for i := 0; i < ids; i += 5 {
		items = append(items, body(i, versions),
			fmt.Sprintf(`{"id":"c%d","type":"x","payload":{"id":%d, "version":%d},"delay":"2h"}`, i, i, versions+1))
		want[fmt.Sprintf("c%d", i)] = fmt.Sprintf(`{"id":%d, "version":%d}`, i, versions+1)
	}
	rp := app1.do("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
	if rp.Status != 200 {
		t.Fatalf("batch: %d %s", rp.Status, rp.Raw)
	}
	for _, res := range rp.JSON["results"].([]any) {
		if st := res.(map[string]any)["state"]; st != "journaled" {
			t.Fatalf("batch item not journaled: %s", rp.Raw)
		}
	}
	submitted := ids*versions + ids/5 // the batch added a fourth version of every fifth id
	if d := app1.JournalDepth(); d != submitted {
		t.Fatalf("journal depth %d, want %d", d, submitted)
	}
	if g := app1.do("GET", "/v1/tasks/c1", ""); g.Status != 200 || g.str("state") != "journaled" ||
		!strings.Contains(string(g.Raw), `"payload":{"id":1, "version":3}`) {
		t.Fatalf("GET journaled: %d %s", g.Status, g.Raw)
	}
	if s := app1.stats(); s.RedisUp || s.JournalDepth != submitted {
		t.Fatalf("stats during the outage: %+v", s)
	}
	app1.stop()

	// A new daemon on the same journal, Redis still down.
	app2 := startApp(t, cfg)
	if d := app2.JournalDepth(); d != submitted {
		t.Fatalf("restarted daemon sees journal depth %d, want %d", d, submitted)
	}
	if g := app2.do("GET", "/v1/tasks/c0", ""); g.Status != 200 || g.str("state") != "journaled" {
		t.Fatalf("GET journaled after restart: %d %s", g.Status, g.Raw)
	}
	for _, m := range []string{"PATCH", "DELETE"} {
		if g := app2.do(m, "/v1/tasks/c0", map[string]string{"PATCH": `{"delay":"1s"}`}[m]); g.Status != 503 || g.errCode() != "unavailable" {
			t.Fatalf("%s while Redis is down: %d %s", m, g.Status, g.Raw)
		}
	}
	if g := app2.do("GET", "/readyz", ""); g.Status != 200 {
		t.Fatalf("readyz while Redis is down: %d %s", g.Status, g.Raw)
	}

	r.Restart(t)
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app2.JournalDepth() == 0 })

	st := openStore(t, r.Client(t), cfg)
	for id, payload := range want {
		tk, err := st.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if string(tk.Payload) != payload || tk.State != task.StateScheduled {
			t.Errorf("%s: payload %s state %s, want the last submission %s", id, tk.Payload, tk.State, payload)
		}
	}
	stats, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var scheduled int64
	for _, s := range stats {
		scheduled += s.Scheduled
	}
	if scheduled != int64(len(want)+1) {
		t.Errorf("%d tasks in the due sets, want %d (each exactly once)", scheduled, len(want)+1)
	}
	if g := app2.do("GET", "/v1/tasks/c1", ""); g.str("state") != "scheduled" {
		t.Errorf("GET after replay: %s", g.Raw)
	}
	m := string(app2.do("GET", "/metrics", "").Raw)
	if !strings.Contains(m, fmt.Sprintf("delayq_journal_replayed_total %d", submitted)) || !strings.Contains(m, "delayq_redis_up 1") {
		t.Errorf("metrics after replay:\n%s", grepLines(m, "delayq_journal", "delayq_redis"))
	}
}

// TestRedisKilledMidBatch kills Redis while batches are in flight: every
// task is answered either scheduled or journaled, and after Redis is back
// every one is in Redis with its content.
func TestRedisKilledMidBatch(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)

	const senders, perBatch = 4, 50
	var (
		mu       sync.Mutex
		answered = map[string]string{} // id -> state answered
		failures []string
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	scheduledOK := make(chan struct{}, 1000)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				items := make([]string, perBatch)
				for i := range items {
					items[i] = fmt.Sprintf(`{"id":"k-%d-%d-%d","type":"x","payload":{"n":%d},"delay":"1h"}`, s, n, i, i)
				}
				rp := app.doQuiet("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
				mu.Lock()
				if rp.err != nil || rp.Status != 200 {
					failures = append(failures, fmt.Sprintf("batch %d/%d: %v %d %s", s, n, rp.err, rp.Status, rp.Raw))
					mu.Unlock()
					continue
				}
				var body struct {
					Results []struct {
						ID, State string
						Error     *wire.Error
					}
				}
				if err := json.Unmarshal(rp.Raw, &body); err != nil || len(body.Results) != perBatch {
					failures = append(failures, fmt.Sprintf("batch %d/%d: %v %s", s, n, err, rp.Raw))
				}
				allScheduled := true
				for _, res := range body.Results {
					if res.Error != nil || (res.State != "scheduled" && res.State != "journaled") {
						failures = append(failures, fmt.Sprintf("%s: %s %+v", res.ID, res.State, res.Error))
					}
					answered[res.ID] = res.State
					allScheduled = allScheduled && res.State == "scheduled"
				}
				mu.Unlock()
				if allScheduled {
					select {
					case scheduledOK <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	for range 8 { // let some batches reach Redis first
		<-scheduledOK
	}
	r.Kill(t)
	testenv.WaitFor(t, 10*time.Second, "journaling", func() bool { return app.JournalDepth() >= 4*perBatch })
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), failures[0])
	}
	count := map[string]int{}
	for _, s := range answered {
		count[s]++
	}
	t.Logf("answers: %v; journal depth %d", count, app.JournalDepth())
	if count["scheduled"] == 0 || count["journaled"] == 0 {
		t.Fatalf("want both scheduled and journaled answers: %v", count)
	}

	r.Restart(t)
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	st := openStore(t, r.Client(t), cfg)
	for id := range answered {
		tk, err := st.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("%s (answered %s) lost: %v", id, answered[id], err)
		}
		var i int
		fmt.Sscanf(id[strings.LastIndexByte(id, '-')+1:], "%d", &i)
		if string(tk.Payload) != fmt.Sprintf(`{"n":%d}`, i) || tk.State != task.StateScheduled {
			t.Fatalf("%s: %s %s", id, tk.Payload, tk.State)
		}
	}
	var total int64
	stats, _ := st.Stats(t.Context())
	for _, s := range stats {
		total += s.Scheduled
	}
	if total != int64(len(answered)) {
		t.Fatalf("%d tasks in Redis, %d answered", total, len(answered))
	}
}

// TestStartWithoutRedis: a daemon whose Redis is unreachable at start
// comes up, journals schedules, answers 503 elsewhere, and opens the
// store once Redis appears.
func TestStartWithoutRedis(t *testing.T) {
	r := startRedis(t)
	r.Kill(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	if rp := app.do("POST", "/v1/tasks", `{"id":"s1","type":"x","payload":1}`); rp.Status != 202 {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("GET", "/v1/tasks/other", ""); rp.Status != 503 || rp.errCode() != "unavailable" {
		t.Fatalf("get: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("GET", "/v1/dead", ""); rp.Status != 503 || rp.errCode() != "unavailable" {
		t.Fatalf("dead: %d %s", rp.Status, rp.Raw)
	}
	if s := app.stats(); s.RedisUp || s.JournalDepth != 1 || s.RedisError == "" {
		t.Fatalf("stats: %+v", s)
	}
	if m := string(app.do("GET", "/metrics", "").Raw); !strings.Contains(m, "delayq_redis_up 0") || !strings.Contains(m, "delayq_journal_depth 1") {
		t.Fatalf("metrics:\n%s", grepLines(m, "delayq_journal", "delayq_redis"))
	}
	r.Restart(t)
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	if rp := app.do("GET", "/v1/tasks/s1", ""); rp.Status != 200 || rp.str("state") != "scheduled" {
		t.Fatalf("after replay: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"s2","type":"x"}`); rp.Status != 201 {
		t.Fatalf("schedule after replay: %d %s", rp.Status, rp.Raw)
	}
}

// TestOtherShardCountFollowsNamespace: a daemon configured with another
// shard count than the namespace's starts and routes by the namespace's
// map (DQ_SHARDS only sets a new namespace's count).
func TestOtherShardCountFollowsNamespace(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	openStore(t, r.Client(t), cfg) // records 16 shards
	cfg.Shards = 8
	app := startApp(t, cfg)
	if rp := app.do("GET", "/v1/stats", ""); rp.Status != 200 || !strings.Contains(string(rp.Raw), `"shard_count":16`) {
		t.Fatalf("stats: %d %s", rp.Status, rp.Raw)
	}
	rp := app.do("POST", "/v1/tasks", `{"id":"follow-1","type":"x"}`)
	if rp.Status != 201 || !strings.Contains(string(rp.Raw), fmt.Sprintf(`"shard":%d`, redisstore.ShardOf("follow-1", 16))) {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
}

// TestReplayDropsRejected: a journaled version of an id that meanwhile
// fired cannot be applied; the compensator drops it (logged) instead of
// retrying forever.
func TestReplayDropsRejected(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	if rp := app.do("POST", "/v1/tasks", `{"id":"p1","type":"x","payload":1}`); rp.Status != 201 {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
	var taken redisstore.Taken
	testenv.WaitFor(t, 5*time.Second, "p1 taken", func() bool {
		var err error
		taken, err = st.Take(t.Context(), st.Shard("p1"), 1, 10, time.Minute)
		return err == nil && len(taken.Tasks) == 1
	})
	// Journal other content for p1 directly (as if Redis had been down).
	tk := &task.Task{ID: "p1", Type: "x", Payload: []byte("2"), PayloadJSON: true, DueAt: time.Now().UTC().Truncate(time.Millisecond)}
	app.journal(t.Context(), []redisstore.Submit{{Task: tk}}, []int{0}, make([]wire.Scheduled, 1))
	testenv.WaitFor(t, 10*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	got, err := st.Get(t.Context(), "p1")
	if err != nil || string(got.Payload) != "1" || got.State != task.StateFired {
		t.Fatalf("p1: %+v %v", got, err)
	}
}

// TestRedisStallIsJournaled: a Redis that stops answering (DEBUG SLEEP)
// makes a schedule time out after DQ_REDIS_TIMEOUT and be journaled; the
// task is in Redis once it answers again.
func TestRedisStallIsJournaled(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.RedisTimeout = 300 * time.Millisecond
	app := startApp(t, cfg)
	if rp := app.do("POST", "/v1/tasks", `{"id":"warm","type":"x"}`); rp.Status != 201 {
		t.Fatalf("warm-up: %d %s", rp.Status, rp.Raw)
	}
	rdb := r.Client(t)
	slept := make(chan error, 1)
	go func() { slept <- rdb.Do(context.WithoutCancel(t.Context()), "DEBUG", "SLEEP", "3").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer probe.Close()
	// Stalled = two pings in a row get no answer within 250ms (a loaded
	// machine can delay one short ping without any stall).
	failed := 0
	testenv.WaitFor(t, 5*time.Second, "redis stalled", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		if probe.Ping(ctx).Err() != nil {
			failed++
		} else {
			failed = 0
		}
		return failed >= 2
	})
	start := time.Now()
	rp := app.do("POST", "/v1/tasks", `{"id":"stall","type":"x","payload":{"v":1},"delay":"1h"}`)
	took := time.Since(start)
	if rp.Status != 202 || rp.str("state") != "journaled" {
		t.Fatalf("schedule during a stall: %d %s", rp.Status, rp.Raw)
	}
	if took > 2*time.Second {
		t.Errorf("schedule during a stall took %v (DQ_REDIS_TIMEOUT is %v)", took, cfg.RedisTimeout)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	tk, err := openStore(t, r.Client(t), cfg).Get(t.Context(), "stall")
	if err != nil || string(tk.Payload) != `{"v":1}` {
		t.Fatalf("stall: %+v %v", tk, err)
	}
}
