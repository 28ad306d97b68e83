package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// outage is a 3-master Redis Cluster (AOF: a killed master keeps its
// data) whose masters go on serving their slots while one is down
// (cluster-require-full-coverage no), and a daemon configuration for it.
type outage struct {
	cl     *testenv.RedisCluster
	cfg    Config
	owner  map[int]string // shard -> address of its master
	victim int            // index in cl.Nodes of the master to kill: holds shards, not the namespace's meta key
	down   []int          // the victim's shards, ascending
}

func newOutage(t *testing.T) *outage {
	t.Helper()
	cl := testenv.StartRedisCluster(t, testenv.RedisOptions{AOF: true})
	for _, n := range cl.Nodes {
		if err := n.Client(t).ConfigSet(t.Context(), "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, cl.Addrs[0])
	cfg.RedisAddrs, cfg.RedisCluster = cl.Addrs, true
	o := &outage{cl: cl, cfg: cfg, owner: map[int]string{}, victim: -1}
	meta := cl.SlotOwner(t, testenv.KeySlot("dq:{"+cfg.Namespace+"}:meta"))
	for sh := range cfg.Shards {
		o.owner[sh] = cl.SlotOwner(t, testenv.KeySlot("dq:{"+cfg.Namespace+":"+strconv.Itoa(sh)+"}:due"))
	}
	for i, addr := range cl.Addrs {
		var shards []int
		for sh, a := range o.owner {
			if a == addr {
				shards = append(shards, sh)
			}
		}
		if addr != meta && len(shards) > len(o.down) {
			o.victim, o.down = i, shards
		}
	}
	if o.victim < 0 {
		t.Fatalf("no master other than the meta key's holds a shard: %v", o.owner)
	}
	slices.Sort(o.down)
	return o
}

func (o *outage) kill(t *testing.T)    { o.cl.Nodes[o.victim].Kill(t) }
func (o *outage) restart(t *testing.T) { o.cl.Nodes[o.victim].Restart(t) }

// onVictim reports whether id's shard lives on the master to kill.
func (o *outage) onVictim(id string) bool {
	return o.owner[shardmap.ShardOf(id, o.cfg.Shards)] == o.cl.Addrs[o.victim]
}

// ids returns n ids with prefix whose shards are on the victim (dead) or
// not.
func (o *outage) ids(prefix string, n int, dead bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); o.onVictim(id) == dead {
			out = append(out, id)
		}
	}
	return out
}

func versioned(id string, version int) string {
	return fmt.Sprintf(`{"id":%q,"type":"x","payload":{"v":%d},"delay":"1h"}`, id, version)
}

// wantPayloads checks that every id is waiting in Redis with the payload
// of version want[id].
func (o *outage) wantPayloads(t *testing.T, want map[string]int) {
	t.Helper()
	st := openStore(t, o.cl.Client(t), o.cfg)
	for id, v := range want {
		tk, err := st.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if p := fmt.Sprintf(`{"v":%d}`, v); string(tk.Payload) != p || tk.State != task.StateScheduled {
			t.Errorf("%s: payload %s state %s, want %s scheduled", id, tk.Payload, tk.State, p)
		}
	}
}

// TestOneMasterDownDelaysNoOther is issue 39's "one master's outage never
// delays the others": with one master of three killed, schedules of the
// other masters' shards are stored at once (201) while those of the dead
// master's shards are journaled (202), its shards are reported down, and
// once it is back the journal drains, each id ending with its last
// submission.
func TestOneMasterDownDelaysNoOther(t *testing.T) {
	o := newOutage(t)
	app := startApp(t, o.cfg)
	if rp := app.do("POST", "/v1/tasks", versioned("warm", 1)); rp.Status != 201 {
		t.Fatalf("warm-up: %d %s", rp.Status, rp.Raw)
	}
	o.kill(t)

	healthy, dead := o.ids("h", 60, false), o.ids("d", 40, true)
	want := map[string]int{}
	var slowest time.Duration
	for i := range 60 {
		start := time.Now()
		rp := app.do("POST", "/v1/tasks", versioned(healthy[i], 1))
		slowest = max(slowest, time.Since(start))
		if rp.Status != 201 || rp.str("outcome") != "created" {
			t.Fatalf("%s (healthy shard) with a master down: %d %s", healthy[i], rp.Status, rp.Raw)
		}
		want[healthy[i]] = 1
		if i < len(dead) {
			rp := app.do("POST", "/v1/tasks", versioned(dead[i], 1))
			if rp.Status != 202 || rp.str("outcome") != "journaled" {
				t.Fatalf("%s (dead shard): %d %s", dead[i], rp.Status, rp.Raw)
			}
			want[dead[i]] = 1
		}
	}
	// a figure, not an assertion (a loaded CI box makes any bound flaky):
	// that a healthy shard's schedule never waits for the dead master is
	// what its 201 shows, since it was stored, not journaled
	t.Logf("slowest schedule of a healthy shard: %v (DQ_REDIS_TIMEOUT %v)", slowest, o.cfg.RedisTimeout)
	// A batch of both kinds, with second versions.
	fresh := o.ids("b", 1, false)[0]
	items := []string{versioned(healthy[0], 2), versioned(dead[0], 2), versioned(fresh, 1), versioned(dead[1], 2)}
	want[healthy[0]], want[dead[0]], want[fresh], want[dead[1]] = 2, 2, 1, 2
	rp := app.do("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
	if rp.Status != 200 {
		t.Fatalf("batch: %d %s", rp.Status, rp.Raw)
	}
	res := rp.JSON["results"].([]any)
	for i, wantOutcome := range []string{"updated", "journaled", "created", "journaled"} {
		if got := res[i].(map[string]any)["outcome"]; got != wantOutcome {
			t.Errorf("batch item %d: outcome %v, want %s: %s", i, got, wantOutcome, rp.Raw)
		}
	}

	// 42 entries were journaled for 40 ids: a compensator pass that runs
	// after the batch drops the two superseded first versions (a later
	// entry of the id decides its content) although their shard is down,
	// so the depth is 40 to 42 depending on whether a pass ran between
	// the batch and this read; never below one entry per id
	s := app.stats()
	if !s.RedisUp || !slices.Equal(s.ShardsDown, o.down) || s.JournalDepth < len(dead) || s.JournalDepth > len(dead)+2 {
		t.Errorf("stats: redis_up %v shards_down %v journal_depth %d, want true %v %d..%d (error %q)",
			s.RedisUp, s.ShardsDown, s.JournalDepth, o.down, len(dead), len(dead)+2, s.RedisError)
	}
	if g := app.do("GET", "/readyz", ""); g.Status != 200 ||
		!strings.Contains(string(g.Raw), fmt.Sprintf("redis: degraded: %d of %d shards down", len(o.down), o.cfg.Shards)) {
		t.Errorf("readyz: %d %s", g.Status, g.Raw)
	}
	m := string(app.do("GET", "/metrics", "").Raw)
	for _, l := range []string{"delayq_redis_up 1", fmt.Sprintf("delayq_redis_shards_down %d", len(o.down)), "delayq_redis_writable 0"} {
		if !strings.Contains(m, l+"\n") {
			t.Errorf("metrics lack %q:\n%s", l, grepLines(m, "delayq_redis", "delayq_tasks_journaled"))
		}
	}
	if strings.Contains(m, `delayq_tasks_journaled_total{reason="shard_down"} 0`+"\n") {
		t.Errorf("no schedule went to the journal without trying its known-down shard:\n%s", grepLines(m, "delayq_tasks_journaled"))
	}
	if g := app.do("GET", "/v1/tasks/"+dead[0], ""); g.Status != 200 || g.str("state") != "journaled" {
		t.Errorf("GET of a journaled task: %d %s", g.Status, g.Raw)
	}
	if g := app.do("GET", "/v1/tasks/"+healthy[2], ""); g.Status != 200 || g.str("state") != "scheduled" {
		t.Errorf("GET of a task of a healthy shard: %d %s", g.Status, g.Raw)
	}
	if g := app.do("DELETE", "/v1/tasks/"+dead[0], ""); g.Status != 503 {
		t.Errorf("DELETE of a journaled task: %d %s", g.Status, g.Raw)
	}
	if g := app.do("PATCH", "/v1/tasks/"+healthy[3], `{"delay":"2h"}`); g.Status != 200 {
		t.Errorf("PATCH of a task of a healthy shard: %d %s", g.Status, g.Raw)
	}

	o.restart(t)
	testenv.WaitFor(t, 30*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	testenv.WaitFor(t, 10*time.Second, "no shard down", func() bool { return len(app.core.shardsDown()) == 0 })
	o.wantPayloads(t, want)
	if rp := app.do("POST", "/v1/tasks", versioned(dead[5], 3)); rp.Status != 200 || rp.str("outcome") != "updated" {
		t.Errorf("schedule after the outage: %d %s", rp.Status, rp.Raw)
	}
}

// TestReplayGetsPastADownShard: a journal with thousands of entries of a
// dead master's shards ahead of entries of healthy shards. One pass
// replays every healthy entry and keeps the others; each id ends with its
// last version, also an id whose versions straddle entries kept.
func TestReplayGetsPastADownShard(t *testing.T) {
	o := newOutage(t)
	app, err := New(t.Context(), o.cfg, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.core.jr.Close(); _ = app.core.rdb.Close() }) // if Run did not
	// The compensator does not run yet: the test runs its passes.
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var subs []redisstore.Submit
	add := func(id string, v int) {
		subs = append(subs, redisstore.Submit{Task: &task.Task{ID: id, Type: "x", Payload: fmt.Appendf(nil, `{"v":%d}`, v), PayloadJSON: true, DueAt: due}})
	}
	dead, healthy := o.ids("d", 3000, true), o.ids("h", 300, false)
	twice := o.ids("twice", 1, false)[0]
	add(twice, 1) // healthy, its versions straddle the dead entries
	for i, id := range dead {
		add(id, 1)
		if i == 1500 {
			add(dead[0], 2) // dead, its versions straddle pages
		}
	}
	for _, id := range healthy {
		add(id, 1)
	}
	add(twice, 2)
	add(healthy[1], 2)
	idx := make([]int, len(subs))
	for i := range idx {
		idx[i] = i
	}
	app.journal(t.Context(), subs, idx, make([]wire.Scheduled, len(subs)))
	want := map[string]int{}
	for _, s := range subs {
		want[s.Task.ID] = int(s.Task.Payload[len(`{"v":`)] - '0')
	}
	// dead[0]'s first version is superseded by its second: the pass drops
	// it unreplayed (only the latest entry of an id is replayed)
	deadEntries := len(dead)

	o.kill(t)
	st := app.core.store.Load()
	start := time.Now()
	p := app.core.comp.pass(t.Context(), st)
	t.Logf("pass: %v, removed %d, kept %d, failed %v", time.Since(start), p.removed, p.kept, p.failed)
	if p.removed != len(subs)-deadEntries || p.kept != deadEntries || p.failed != nil || app.JournalDepth() != deadEntries {
		t.Fatalf("pass: removed %d kept %d (failed %v), journal depth %d; want %d replayed, %d kept",
			p.removed, p.kept, p.failed, app.JournalDepth(), len(subs)-deadEntries, deadEntries)
	}
	if got := app.core.shardsDown(); !slices.Equal(got, o.down) {
		t.Errorf("shards down %v, want %v", got, o.down)
	}
	healthyWant := map[string]int{}
	for id, v := range want {
		if !o.onVictim(id) {
			healthyWant[id] = v
		}
	}
	o.wantPayloads(t, healthyWant)
	// A second pass tries nothing of the down shards.
	start = time.Now()
	if p := app.core.comp.pass(t.Context(), st); p.removed != 0 || p.kept != deadEntries || p.failed != nil {
		t.Fatalf("second pass: removed %d kept %d failed %v", p.removed, p.kept, p.failed)
	}
	t.Logf("second pass over %d kept entries: %v", deadEntries, time.Since(start))

	// The master back: the probe clears the marks, the compensator
	// replays the rest in order.
	o.restart(t)
	testenv.WaitFor(t, 30*time.Second, "probe finds the shards back", func() bool {
		app.core.probeShards(t.Context(), st)
		return len(app.core.shardsDown()) == 0
	})
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	testenv.WaitFor(t, 30*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	o.wantPayloads(t, want)
}

// TestRestartWithJournalOfADownShard: a daemon restarted on a journal
// that holds entries of a dead master's shard rebuilds its lanes: a new
// version of a journaled id is journaled behind the old one (not sent
// first), other ids are stored, and the journal drains to the latest
// versions once the master is back.
func TestRestartWithJournalOfADownShard(t *testing.T) {
	o := newOutage(t)
	app1 := startApp(t, o.cfg)
	dead, healthy := o.ids("d", 3, true), o.ids("h", 3, false)
	if rp := app1.do("POST", "/v1/tasks", versioned(healthy[0], 1)); rp.Status != 201 {
		t.Fatalf("before the outage: %d %s", rp.Status, rp.Raw)
	}
	o.kill(t)
	for _, id := range dead {
		if rp := app1.do("POST", "/v1/tasks", versioned(id, 1)); rp.Status != 202 {
			t.Fatalf("%s: %d %s", id, rp.Status, rp.Raw)
		}
	}
	app1.stop()

	app2, err := New(t.Context(), o.cfg, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app2.core.jr.Close(); _ = app2.core.rdb.Close() }) // if Run did not
	if d := app2.JournalDepth(); d != len(dead) {
		t.Fatalf("journal depth after the restart %d, want %d", d, len(dead))
	}
	post := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := serveRecorded(app2.Handler(), req)
		return w
	}
	// The compensator does not run yet; the master is still down.
	if w := post(versioned(dead[0], 2)); w.Code != http.StatusAccepted {
		t.Fatalf("new version of a journaled id: %d %s", w.Code, w.Body)
	}
	if w := post(versioned(healthy[1], 1)); w.Code != http.StatusCreated {
		t.Fatalf("id of a healthy shard: %d %s", w.Code, w.Body)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	w := serveRecorded(app2.Handler(), req)
	if m := w.Body.String(); !strings.Contains(m, `delayq_tasks_journaled_total{reason="order"} 1`+"\n") {
		t.Errorf("the new version was not journaled behind the old one (lanes not rebuilt?):\n%s", grepLines(m, "delayq_tasks_journaled"))
	}

	o.restart(t)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app2.Run(ctx) }()
	testenv.WaitFor(t, 30*time.Second, "journal drained", func() bool { return app2.JournalDepth() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	o.wantPayloads(t, map[string]int{dead[0]: 2, dead[1]: 1, dead[2]: 1, healthy[0]: 1, healthy[1]: 1})
}

func TestShardHealth(t *testing.T) {
	var h shardHealth
	now := time.UnixMilli(1_700_000_000_000)
	m := shardmap.Initial(8)
	if h.downFor(m, "a", now) || h.list(8, now) != nil {
		t.Fatal("fresh: something down")
	}
	if !h.mark(3, now, now.Add(time.Second)) || h.mark(3, now, now.Add(2*time.Second)) {
		t.Fatal("mark: first / again")
	}
	h.mark(5, now, now.Add(time.Second))
	if got := h.list(8, now); !slices.Equal(got, []int{3, 5}) {
		t.Fatalf("list %v", got)
	}
	if got := h.list(8, now.Add(1500*time.Millisecond)); !slices.Equal(got, []int{3}) {
		t.Fatalf("list after shard 5's mark lapsed: %v", got)
	}
	var on3, on1 string
	for i := 0; on3 == "" || on1 == ""; i++ {
		id := strconv.Itoa(i)
		switch shardmap.ShardOf(id, 8) {
		case 3:
			on3 = id
		case 1:
			on1 = id
		}
	}
	if !h.downFor(m, on3, now) || h.downFor(m, on1, now) {
		t.Fatal("downFor")
	}
	// growing 4 -> 8: an id of new shard 7 is tried on its old shard 3 first
	g := shardmap.Map{Count: 8, Previous: 4, State: shardmap.Migrating}
	var moving string
	for i := 0; moving == ""; i++ {
		if id := strconv.Itoa(i); shardmap.ShardOf(id, 8) == 7 {
			moving = id
		}
	}
	if !h.downFor(g, moving, now) || routeShard(g, moving) != 3 {
		t.Fatal("downFor while migrating: the old shard is down")
	}
	if !h.clear(3) || h.clear(3) || h.down(3, now) {
		t.Fatal("clear")
	}
	if !h.clear(5) || h.marked.Load() != 0 {
		t.Fatalf("marked %d after clearing all", h.marked.Load())
	}
}
