package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/daemon/wire"
)

// httpMetrics are the HTTP surface's metrics (namespace delayq).
type httpMetrics struct {
	requests *prometheus.CounterVec   // delayq_http_requests_total{route,code}
	duration *prometheus.HistogramVec // delayq_http_request_duration_seconds{route}
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: admin.Namespace, Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// metrics are the ingest core's Prometheus metrics (namespace delayq).
type metrics struct {
	scheduled *prometheus.CounterVec // delayq_tasks_scheduled_total{outcome}
	journaled *prometheus.CounterVec // delayq_tasks_journaled_total{reason}
	replayed  prometheus.Counter     // delayq_journal_replayed_total
	redisErrs prometheus.Counter     // delayq_redis_errors_total
	refusals  *prometheus.CounterVec // delayq_redis_write_refusals_total{reason}
	groups    prometheus.Histogram   // delayq_schedule_group_size
}

// Why a schedule was journaled (delayq_tasks_journaled_total{reason}).
const (
	reasonRedisDown   = "redis_down"  // Redis (a single server, or every master) does not answer, or the store is not open
	reasonShardDown   = "shard_down"  // its shard is known down (shardhealth.go): not tried
	reasonUnavailable = "unavailable" // its write failed unavailable (refused, timed out, not replicated, ...)
	reasonOrder       = "order"       // an earlier submission of its id (or an id of its lane) waits in the journal
	reasonUnconfirmed = "unconfirmed" // written, but the replicas did not confirm it in time (DQ_REDIS_REPLICA_ACKS)
)

func newMetrics(reg prometheus.Registerer, journalDepth, redisUp, redisWritable, shardsDown func() float64) *metrics {
	m := &metrics{
		scheduled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "tasks_scheduled_total",
			Help: "Schedule requests by outcome: created, unchanged, updated, rejected, journaled.",
		}, []string{"outcome"}),
		journaled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "tasks_journaled_total",
			Help: "Schedules journaled, by reason: redis_down, shard_down (its shard known down), unavailable (its write failed), order (an earlier entry of its id's lane waits).",
		}, []string{"reason"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "journal_replayed_total",
			Help: "Journal entries replayed into Redis (or dropped as non-retryable) and removed from the journal.",
		}),
		redisErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "redis_errors_total",
			Help: "Redis operations of the daemon that failed (unreachable, timeout or an unexpected answer).",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "redis_write_refusals_total",
			Help: "Writes Redis refused although it answered (reason: oom, readonly, noreplicas, masterdown, loading, busy, cluster); their tasks were journaled.",
		}, []string{"reason"}),
		groups: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: admin.Namespace, Name: "schedule_group_size",
			Help:    "Single-task schedules (POST /v1/tasks, an embedded producer's Schedule) stored together by one store call of the coalescer; 1 when none was waiting alongside.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
	}
	for _, o := range []string{wire.OutcomeCreated, wire.OutcomeUnchanged, wire.OutcomeUpdated, wire.OutcomeRejected, wire.OutcomeJournaled} {
		m.scheduled.WithLabelValues(o)
	}
	for _, r := range []string{reasonRedisDown, reasonShardDown, reasonUnavailable, reasonOrder, reasonUnconfirmed} {
		m.journaled.WithLabelValues(r)
	}
	reg.MustRegister(m.scheduled, m.journaled, m.replayed, m.redisErrs, m.refusals, m.groups,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "redis_writable",
			Help: "1 when Redis takes the daemon's writes; 0 while it is unreachable, refuses them (e.g. OOM) or a shard is down, and schedules go to the journal.",
		}, redisWritable),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "journal_depth",
			Help: "Entries in the compensation journal waiting for replay.",
		}, journalDepth),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "redis_up",
			Help: "1 when Redis answers the daemon: a single server's last operation or ping succeeded, or some master of a cluster answered the ping; else 0.",
		}, redisUp),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "redis_shards_down",
			Help: "Shards whose Redis Cluster master is known down: their schedules are journaled without trying them.",
		}, shardsDown),
	)
	return m
}
