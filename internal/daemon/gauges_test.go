package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// gathered is one gather of a registry: family name -> label set -> value.
type gathered map[string]map[string]float64

func gather(t testing.TB, reg prometheus.Gatherer) gathered {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := gathered{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			series[labelKey(m)] = m.GetGauge().GetValue()
		}
		out[mf.GetName()] = series
	}
	return out
}

func labelKey(m *dto.Metric) string {
	k := ""
	for _, l := range m.GetLabel() {
		k += l.GetName() + "=" + l.GetValue() + ","
	}
	return k
}

// sum is the sum of a family's series; ok is false when it has none.
func (g gathered) sum(name string) (float64, bool) {
	s, ok := g[name]
	if !ok {
		return 0, false
	}
	var v float64
	for _, x := range s {
		v += x
	}
	return v, true
}

// shardFamilies are the per-shard gauges of the collector.
var shardFamilies = []string{
	"delayq_shard_pending_tasks", "delayq_shard_overdue_tasks", "delayq_shard_oldest_overdue_seconds",
	"delayq_shard_paused_tasks", "delayq_shard_firing_tasks", "delayq_shard_dead_tasks",
}

// TestGaugeShardFigures: on real Redis, the gauges show every shard and
// add up to what was scheduled: overdue tasks (due in the past, nobody
// fires them), future ones, a dead one.
func TestGaugeShardFigures(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 4
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	// one dead task, first (so that the take finds it alone): taken by a
	// "leader", settled, finished dead by a "worker"
	if rp := app.do("POST", "/v1/tasks", `{"id":"dies","type":"x"}`); rp.Status != 201 {
		t.Fatalf("schedule dies: %d %s", rp.Status, rp.Raw)
	}
	sh := st.Shard("dies")
	tk, err := st.Take(t.Context(), sh, 1, 100, time.Minute)
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	fired := tk.Fired()
	if len(fired) != 1 || fired[0].ID != "dies" {
		t.Fatalf("take of shard %d: %v, want dies alone", sh, fired)
	}
	gen := fired[0].Gen
	if _, _, err := st.Settle(t.Context(), sh, 1, tk.Lease, nil); err != nil {
		t.Fatalf("settle: %v", err)
	}
	if s, err := st.Finish(t.Context(), redisstore.Finish{ID: "dies", Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil || s != task.StateDead {
		t.Fatalf("finish dead: %s %v", s, err)
	}

	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	for i := range 3 {
		if rp := app.do("POST", "/v1/tasks", fmt.Sprintf(`{"id":"late-%d","type":"x","due_at":%q}`, i, past)); rp.Status != 201 {
			t.Fatalf("schedule late-%d: %d %s", i, rp.Status, rp.Raw)
		}
	}
	for i := range 2 {
		if rp := app.do("POST", "/v1/tasks", fmt.Sprintf(`{"id":"later-%d","type":"x","delay":"1h"}`, i)); rp.Status != 201 {
			t.Fatalf("schedule later-%d: %d %s", i, rp.Status, rp.Raw)
		}
	}

	g := gather(t, app.Registry())
	if up, _ := g.sum("delayq_shard_stats_up"); up != 1 {
		t.Fatalf("delayq_shard_stats_up %v, want 1", up)
	}
	for _, f := range shardFamilies {
		if n := len(g[f]); n != cfg.Shards {
			t.Errorf("%s: %d series, want one per shard (%d): %v", f, n, cfg.Shards, g[f])
		}
	}
	want := map[string]float64{
		"delayq_shard_pending_tasks": 5, "delayq_shard_overdue_tasks": 3, "delayq_shard_paused_tasks": 0,
		"delayq_shard_firing_tasks": 0, "delayq_shard_dead_tasks": 1, "delayq_dead_tasks": 1,
	}
	for f, w := range want {
		if got, _ := g.sum(f); got != w {
			t.Errorf("%s sums to %v, want %v (%v)", f, got, w, g[f])
		}
	}
	// the late tasks have been due for a minute
	var oldest float64
	for _, v := range g["delayq_shard_oldest_overdue_seconds"] {
		oldest = max(oldest, v)
	}
	if oldest < 59 || oldest > 600 {
		t.Errorf("oldest overdue %vs, want about 60s", oldest)
	}
	for k, v := range g["delayq_shard_overdue_tasks"] {
		if v == 0 && g["delayq_shard_oldest_overdue_seconds"][k] != 0 {
			t.Errorf("shard %s: nothing overdue but oldest overdue %v", k, g["delayq_shard_oldest_overdue_seconds"][k])
		}
	}
}

// TestGaugeRedisDown: while Redis is away a scrape answers within the
// gauges' timeout with delayq_shard_stats_up 0 and no shard series; when
// Redis is back, so are they.
func TestGaugeRedisDown(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	if up, _ := gather(t, app.Registry()).sum("delayq_shard_stats_up"); up != 1 {
		t.Fatalf("delayq_shard_stats_up %v with Redis up", up)
	}
	r.Stop(t)
	// past the cache of the last good read
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		g := gather(t, app.Registry())
		if took := time.Since(start); took > gaugeTimeout+time.Second {
			t.Fatalf("a scrape with Redis down took %v (timeout %v)", took, gaugeTimeout)
		}
		up, ok := g.sum("delayq_shard_stats_up")
		if ok && up == 0 {
			for _, f := range append(shardFamilies, "delayq_dead_tasks") {
				if _, has := g[f]; has {
					t.Errorf("%s exported while Redis is down: %v", f, g[f])
				}
			}
			if _, has := g["delayq_journal_depth"]; !has {
				t.Error("delayq_journal_depth missing: the other metrics must not depend on Redis")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delayq_shard_stats_up still %v (present %v) 10s after Redis stopped", up, ok)
		}
		time.Sleep(100 * time.Millisecond) // poll interval of a bounded wait
	}
	r.Restart(t)
	deadline = time.Now().Add(15 * time.Second)
	for {
		g := gather(t, app.Registry())
		if up, _ := g.sum("delayq_shard_stats_up"); up == 1 && len(g["delayq_shard_pending_tasks"]) == cfg.Shards {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard gauges not back 15s after Redis restarted: %v", g["delayq_shard_stats_up"])
		}
		time.Sleep(100 * time.Millisecond) // poll interval of a bounded wait
	}
}

// countingStats is a statsReader that counts reads and can hold them.
type countingStats struct {
	reads atomic.Int64
	hold  chan struct{} // nil: answer at once
	err   error
}

func (c *countingStats) Stats(ctx context.Context) ([]redisstore.ShardStats, error) {
	c.reads.Add(1)
	if c.hold != nil {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return []redisstore.ShardStats{{Shard: 0, Scheduled: 4, Overdue: 2, OldestOverdueSeconds: 1.5, Dead: 1}, {Shard: 1, Dead: 2, Paused: 3}}, nil
}

// TestGaugeCacheSharesReads: parallel scrapes share one read; a scrape
// after the TTL reads again; a failed read is cached too and exports only
// delayq_shard_stats_up 0; without a store nothing is read.
func TestGaugeCacheSharesReads(t *testing.T) {
	cs := &countingStats{hold: make(chan struct{})}
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var store atomic.Pointer[countingStats]
	store.Store(cs)
	g := newShardGauges(t.Context(), func() statsReader {
		if s := store.Load(); s != nil {
			return s
		}
		return nil
	}, slog.New(slog.DiscardHandler))
	g.now = clock
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)

	results := make([]gathered, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = gather(t, reg) })
	}
	// every scrape is in flight (one reads, the others wait for it) before
	// the read answers
	deadline := time.Now().Add(5 * time.Second)
	for cs.reads.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read started")
		}
		time.Sleep(time.Millisecond) // poll interval of a bounded wait
	}
	close(cs.hold)
	wg.Wait()
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("8 parallel scrapes made %d reads, want 1", n)
	}
	for i, r := range results {
		if got := r["delayq_shard_overdue_tasks"]["shard=0,"]; got != 2 {
			t.Errorf("scrape %d: overdue of shard 0 = %v, want 2", i, got)
		}
		if got, _ := r.sum("delayq_dead_tasks"); got != 3 {
			t.Errorf("scrape %d: delayq_dead_tasks %v, want 3", i, got)
		}
		if got := r["delayq_shard_paused_tasks"]["shard=1,"]; got != 3 {
			t.Errorf("scrape %d: paused of shard 1 = %v, want 3", i, got)
		}
	}

	advance(gaugeTTL / 2)
	gather(t, reg)
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("a scrape within the TTL read again (%d reads)", n)
	}
	advance(gaugeTTL)
	cs.err = errors.New("redis: connection refused")
	r := gather(t, reg)
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("a scrape after the TTL: %d reads, want 2", n)
	}
	if len(r) != 1 || r["delayq_shard_stats_up"][""] != 0 {
		t.Fatalf("failed read: want only delayq_shard_stats_up 0, got %v", r)
	}
	gather(t, reg)
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("the failure was not cached: %d reads", n)
	}

	store.Store(nil)
	advance(gaugeTTL)
	r = gather(t, reg)
	if n := cs.reads.Load(); n != 2 || len(r) != 1 || r["delayq_shard_stats_up"][""] != 0 {
		t.Fatalf("without a store: %d reads, %v", n, r)
	}
}
