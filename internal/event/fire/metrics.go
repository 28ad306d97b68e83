package fire

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// Metrics are the firing metrics of one process, shared by its pollers.
type Metrics struct {
	Lag             prometheus.Histogram
	BatchSize       prometheus.Histogram
	ProduceDuration prometheus.Histogram
	ProduceErrors   prometheus.Counter
	Fired           prometheus.Counter
	DeadLettered    prometheus.Counter
	LeaseReclaims   prometheus.Counter
	Fenced          prometheus.Counter
	StoreErrors     prometheus.Counter
	// DeadAtFire counts tasks made dead at fire time because Kafka
	// refused them for good, by reason class (see Refusal); no task type
	// label.
	DeadAtFire *prometheus.CounterVec
	// PoisonGrace is how many refused tasks are in their grace now.
	PoisonGrace prometheus.Gauge
	// DeadNotifyErrors counts dead-letter notifications (to the dead
	// topic) that failed; the task is dead in Redis regardless.
	DeadNotifyErrors prometheus.Counter
	// Delivered counts tasks that ended delivered (their topic is not
	// worked); Receipts counts fire receipts stored.
	Delivered prometheus.Counter
	Receipts  prometheus.Counter
}

// LagBuckets are the buckets of the firing lag and of the produce
// duration, 0.5ms to 60s: every millisecond up to 10ms, so that a p99 of a
// few milliseconds reads as such (histogram_quantile interpolates within
// a bucket), then coarser; 1s is the bound the DelayqFireLagHigh alert uses.
var LagBuckets = []float64{
	0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01,
	0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// NewMetrics registers the firing metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	ns := admin.Namespace
	m := &Metrics{
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "fire_lag_seconds",
			Help:    "Time from a task's due time to its fire time (the take; the record timestamp), by Redis' clock, for tasks Kafka confirmed; the produce that follows is delayq_produce_duration_seconds.",
			Buckets: LagBuckets,
		}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "fire_batch_size",
			Help:    "Tasks claimed per take that claimed any.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		ProduceDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "produce_duration_seconds",
			Help:    "Duration of one synchronous Kafka batch write (the produce part of a fired task's lag: after the fire time, before Kafka's ack).",
			Buckets: LagBuckets,
		}),
		ProduceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "produce_errors_total",
			Help: "Records Kafka did not confirm (released to fire again).",
		}),
		Fired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fired_total",
			Help: "Records Kafka confirmed.",
		}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "dead_lettered_total",
			Help: "Tasks written to the dead-letter topic instead of their own (unreadable record, record Kafka refuses for good).",
		}),
		LeaseReclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "lease_reclaims_total",
			Help: "Tasks an earlier claim left in flight that a leader put back to fire (adopt, expired lease).",
		}),
		Fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fenced_total",
			Help: "Times a poller's token was refused because a newer leader exists.",
		}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fire_store_errors_total",
			Help: "Failed store calls of pollers (Redis unreachable and others).",
		}),
		DeadAtFire: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "fire_dead_total",
			Help: "Tasks made dead at fire time because Kafka refused them for good after the poison grace, by reason (unknown_topic, too_large, invalid_topic, invalid_record, not_authorized).",
		}, []string{"reason"}),
		PoisonGrace: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "fire_poison_grace_tasks",
			Help: "Tasks Kafka refused for good that wait out their grace (DQ_FIRE_POISON_GRACE) before they are made dead.",
		}),
		DeadNotifyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fire_dead_notify_errors_total",
			Help: "Dead-letter notifications to the dead topic that failed (the task is dead in Redis regardless).",
		}),
		Delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fire_delivered_total",
			Help: "Tasks that ended delivered: Kafka acknowledged their record and no delayq work process handles their topic.",
		}),
		Receipts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "fire_receipts_total",
			Help: "Fire receipts stored (partition and offset of a record Kafka acknowledged), one per fired copy.",
		}),
	}
	for _, r := range []string{RefusedUnknownTopic, RefusedTooLarge, RefusedInvalidTopic, RefusedInvalidRecord, RefusedNotAuthorized} {
		m.DeadAtFire.WithLabelValues(r)
	}
	reg.MustRegister(m.DeadAtFire, m.PoisonGrace, m.DeadNotifyErrors, m.Lag, m.BatchSize, m.ProduceDuration, m.ProduceErrors, m.Fired,
		m.DeadLettered, m.LeaseReclaims, m.Fenced, m.StoreErrors, m.Delivered, m.Receipts)
	return m
}
