package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome labels of delayq_work_handled_total.
const (
	outSucceeded    = "succeeded"
	outRetry        = "retry"
	outDead         = "dead"
	outSkippedStale = "skipped_stale"
	outSkippedDone  = "skipped_done"
	outHostile      = "hostile"
	outDeferred     = "deferred" // held back by a rate limit, back in Redis
)

// typeInvalid is the type label of records that carry no usable type.
const typeInvalid = "_invalid"

type metrics struct {
	handled     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lag         prometheus.Histogram
	retries     prometheus.Counter
	dead        prometheus.Counter
	consumerLag prometheus.Gauge
	running     prometheus.Gauge
	rebalances  prometheus.Counter
	commits     *prometheus.CounterVec
	claimWaits  prometheus.Counter
	reclaims    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "delayq", "work"
	m := &metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "handled_total",
			Help: "Records handled, by task type and outcome (succeeded, retry, dead, skipped_stale, skipped_done, hostile, deferred)."},
			[]string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name:    "handler_duration_seconds",
			Help:    "How long handlers ran, by task type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"type"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name:    "e2e_lag_seconds",
			Help:    "Handler start minus the task's due time.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retries_total", Help: "Failures scheduled again in Redis."}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dead_total", Help: "Records written to the dead topic (dead tasks and hostile records)."}),
		consumerLag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "consumer_lag", Help: "Records behind the partition end, as the Kafka reader last saw it."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "running", Help: "Records being handled now."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rebalances_total", Help: "Consumer group generations this worker joined."}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "commits_total", Help: "Offset commits, by result (ok, error)."}, []string{"result"}),
		claimWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "claim_waits_total", Help: "Records that found their execution claimed by another run and waited."}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reclaims_total", Help: "Records claimed again before running because they waited for a handler slot for more than half their claim's TTL."}),
	}
	if reg != nil {
		reg.MustRegister(m.handled, m.duration, m.lag, m.retries, m.dead, m.consumerLag, m.running,
			m.rebalances, m.commits, m.claimWaits, m.reclaims)
	}
	return m
}
