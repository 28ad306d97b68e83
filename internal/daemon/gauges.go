package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/redisstore"
)

// Shard gauge timing: a scrape waits at most gaugeTimeout for Redis, and
// scrapes within gaugeTTL of the last read (Prometheus replicas, a
// dashboard and the console polling at once) share it.
const (
	gaugeTimeout = 2 * time.Second
	gaugeTTL     = time.Second
)

// statsReader is what the shard gauges need of the store.
type statsReader interface {
	Stats(ctx context.Context) ([]redisstore.ShardStats, error)
}

// shardGauges is a Prometheus collector of every shard's backlog, read
// from Redis when scraped (one pipelined Store.Stats, cached for gaugeTTL,
// so parallel scrapes do not multiply the work). When Redis cannot be read
// it exports delayq_shard_stats_up 0 and no shard series: a gauge frozen at
// its last value would hide the outage, and absent series make alerts on
// them go quiet only together with the "stats down" signal.
type shardGauges struct {
	base    context.Context // values only: each read is bounded by timeout
	store   func() statsReader
	timeout time.Duration
	ttl     time.Duration
	now     func() time.Time
	log     *slog.Logger

	up, pending, overdue, oldest, paused, firing, shardDead, dead *prometheus.Desc

	mu    sync.Mutex // held during a read: a concurrent scrape waits and shares it
	at    time.Time  // when stats/err were read; zero before the first read
	stats []redisstore.ShardStats
	err   error
}

// newShardGauges returns the collector. store answers nil while the
// daemon has no store yet (Redis never answered): that scrape exports
// delayq_shard_stats_up 0.
func newShardGauges(ctx context.Context, store func() statsReader, log *slog.Logger) *shardGauges {
	ns := admin.Namespace
	shard := []string{"shard"}
	return &shardGauges{
		base:    context.WithoutCancel(ctx),
		store:   store,
		timeout: gaugeTimeout,
		ttl:     gaugeTTL,
		now:     time.Now,
		log:     log,
		up: prometheus.NewDesc(ns+"_shard_stats_up",
			"1 when the daemon read the shards' figures from Redis for this scrape, 0 when it could not (then no delayq_shard_* series are exported).", nil, nil),
		pending: prometheus.NewDesc(ns+"_shard_pending_tasks",
			"Tasks waiting on the shard (scheduled or retrying, due now or later; parked tasks of paused types included, see delayq_shard_paused_tasks). The pending of GET /v1/cluster.", shard, nil),
		overdue: prometheus.NewDesc(ns+"_shard_overdue_tasks",
			"Waiting tasks of the shard whose due time has passed (parked tasks of paused types excluded).", shard, nil),
		oldest: prometheus.NewDesc(ns+"_shard_oldest_overdue_seconds",
			"How long the earliest overdue task of the shard has been due; 0 when none is overdue.", shard, nil),
		paused: prometheus.NewDesc(ns+"_shard_paused_tasks",
			"Tasks of the shard parked because their type is paused.", shard, nil),
		firing: prometheus.NewDesc(ns+"_shard_firing_tasks",
			"Tasks of the shard taken by its leader and not yet confirmed by Kafka.", shard, nil),
		shardDead: prometheus.NewDesc(ns+"_shard_dead_tasks",
			"Dead tasks (dead letters) kept on the shard.", shard, nil),
		dead: prometheus.NewDesc(ns+"_dead_tasks",
			"Dead tasks (dead letters) kept in Redis, all shards.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *shardGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.up, g.pending, g.overdue, g.oldest, g.paused, g.firing, g.shardDead, g.dead} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *shardGauges) Collect(ch chan<- prometheus.Metric) {
	stats, err := g.read()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(g.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(g.up, prometheus.GaugeValue, 1)
	var dead int64
	for _, s := range stats {
		sh := strconv.Itoa(s.Shard)
		ch <- prometheus.MustNewConstMetric(g.pending, prometheus.GaugeValue, float64(s.Scheduled), sh)
		ch <- prometheus.MustNewConstMetric(g.overdue, prometheus.GaugeValue, float64(s.Overdue), sh)
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, s.OldestOverdueSeconds, sh)
		ch <- prometheus.MustNewConstMetric(g.paused, prometheus.GaugeValue, float64(s.Paused), sh)
		ch <- prometheus.MustNewConstMetric(g.firing, prometheus.GaugeValue, float64(s.Firing), sh)
		ch <- prometheus.MustNewConstMetric(g.shardDead, prometheus.GaugeValue, float64(s.Dead), sh)
		dead += s.Dead
	}
	ch <- prometheus.MustNewConstMetric(g.dead, prometheus.GaugeValue, float64(dead))
}

// errNoStore is the read error while the daemon has no store yet.
var errNoStore = errors.New("no store yet: redis has not answered since the daemon started")

// read returns the shards' figures, from the cache when they are younger
// than ttl. Failures are cached too: while Redis is away, parallel
// scrapes do not each wait out the timeout.
func (g *shardGauges) read() ([]redisstore.ShardStats, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.at.IsZero() && now.Sub(g.at) < g.ttl && now.Sub(g.at) >= 0 {
		return g.stats, g.err
	}
	var stats []redisstore.ShardStats
	var err error
	if st := g.store(); st == nil {
		err = errNoStore
	} else {
		ctx, cancel := context.WithTimeout(g.base, g.timeout)
		stats, err = st.Stats(ctx)
		cancel()
	}
	switch {
	case err != nil && g.err == nil:
		g.log.Warn("shard gauges: cannot read the shards' figures; exporting delayq_shard_stats_up 0", "error", err)
	case err == nil && g.err != nil:
		g.log.Info("shard gauges: shards' figures readable again")
	}
	// the figures are as of the end of the read: the next read is due ttl
	// after it, however long this one took
	g.at, g.stats, g.err = g.now(), stats, err
	return stats, err
}

// statsReader is the store for the shard gauges, nil until Redis answered.
func (co *core) statsReader() statsReader {
	if st := co.store.Load(); st != nil {
		return st
	}
	return nil
}
