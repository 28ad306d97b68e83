package leader

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// Metrics are the leadership metrics of one process.
type Metrics struct {
	ShardsLed     prometheus.Gauge
	LeaderChanges *prometheus.CounterVec // change: acquired, released, lost
	Sessions      prometheus.Counter
	// ShardCount is the shard count this process balances over (it grows
	// with Manager.SetShards).
	ShardCount prometheus.Gauge
	// info is delayq_shard_leader_info; New attaches the manager to it.
	info *leaderInfo
}

// NewMetrics registers the leadership metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ShardsLed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "shards_led",
			Help: "Shards this process currently leads.",
		}),
		LeaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "leader_changes_total",
			Help: "Shard leadership changes of this process: acquired, released (given back), lost (session or fencing).",
		}, []string{"change"}),
		Sessions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "etcd_sessions_total",
			Help: "Etcd sessions (leases) this process created.",
		}),
		ShardCount: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "event_shard_count",
			Help: "Shards this process balances leadership over (the namespace's shard count as this process knows it).",
		}),
		info: newLeaderInfo(),
	}
	for _, c := range []string{"acquired", "released", "lost"} {
		m.LeaderChanges.WithLabelValues(c)
	}
	reg.MustRegister(m.ShardsLed, m.LeaderChanges, m.Sessions, m.ShardCount, m.info)
	return m
}
