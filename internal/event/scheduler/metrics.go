package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// Outcomes of a tick (the outcome label of delayq_schedule_ticks_total).
const (
	// outcomeMaterialized: scheduled ahead of its time, or found already
	// materialized (by an earlier leader).
	outcomeMaterialized = "materialized"
	// outcomeCaughtUp: missed (its time had passed) and scheduled late by
	// the catch-up policy.
	outcomeCaughtUp = "caught_up"
	// outcomeSkipped: missed and dropped by the catch-up policy.
	outcomeSkipped = "skipped"
)

// Operations of delayq_scheduler_errors_total.
const (
	opSession   = "session"
	opCampaign  = "campaign"
	opLoad      = "load"
	opCompile   = "compile"
	opLookup    = "lookup"
	opCancel    = "cancel"
	opSchedule  = "materialize"
	opWrite     = "write_state"
	opFenced    = "fenced"
	opLeaseLate = "lease_unconfirmed"
)

// Metrics are the scheduler's metrics.
type Metrics struct {
	Leader    prometheus.Gauge
	Ticks     *prometheus.CounterVec // outcome
	Errors    *prometheus.CounterVec // op
	Schedules prometheus.Gauge
	// Planned counts the schedules the passes planned: changed ones, and
	// those with a tick entering the lookahead or leaving the pending
	// ticks. Idle schedules are not planned between their ticks.
	Planned prometheus.Counter
	Pass    prometheus.Histogram
}

// NewMetrics registers the scheduler metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "scheduler_leader",
			Help: "1 while this process is the schedule scheduler's leader, else 0.",
		}),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "schedule_ticks_total",
			Help: "Schedule ticks handled by this process as scheduler leader: materialized (ahead of time, or found materialized), caught_up (missed, scheduled late), skipped (missed, dropped by the catch-up policy).",
		}, []string{"outcome"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "scheduler_errors_total",
			Help: "Scheduler errors by operation (the pass is retried).",
		}, []string{"op"}),
		Schedules: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "schedules",
			Help: "Schedules the scheduler leader follows (0 on other processes).",
		}),
		Planned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "scheduler_planned_total",
			Help: "Schedules planned by the scheduler leader's passes: changed ones, and those with a tick entering the lookahead or a pending tick passing (idle schedules cost nothing between their ticks).",
		}),
		Pass: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: admin.Namespace, Name: "scheduler_pass_seconds",
			Help:    "Duration of one scheduler pass of the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
	}
	for _, o := range []string{outcomeMaterialized, outcomeCaughtUp, outcomeSkipped} {
		m.Ticks.WithLabelValues(o)
	}
	for _, op := range []string{opSession, opCampaign, opLoad, opCompile, opLookup, opCancel, opSchedule, opWrite, opFenced, opLeaseLate} {
		m.Errors.WithLabelValues(op)
	}
	reg.MustRegister(m.Leader, m.Ticks, m.Errors, m.Schedules, m.Planned, m.Pass)
	return m
}
