package engine

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
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
	outParked       = "parked"   // its type is paused: parked in Redis
)

// typeInvalid is the type label of records that carry no usable type;
// typeOther the one of every type past Config.MetricsMaxTypes.
const (
	typeInvalid = "_invalid"
	typeOther   = "_other"
)

// DefaultMetricsMaxTypes is the default of Config.MetricsMaxTypes.
const DefaultMetricsMaxTypes = 100

// typeLabels bounds the values of the type label: the first maxTypes distinct
// task types this worker sees keep their own name, every later one is
// counted under "_other" (task types are chosen by whoever schedules
// tasks; without a bound, 2,000 types made 36,000 series). Every
// type-labelled metric takes its label from here.
type typeLabels struct {
	maxTypes int
	mu       sync.RWMutex
	kept     map[string]*typeSeries
	other    *typeSeries
	invalid  *typeSeries
}

// typeSeries is one type label and the series of it that every handled
// task touches (succeeded, handler duration), each resolved on first use
// as WithLabelValues would make it: resolving them by label values per
// task (hashing the values, a lookup under the vector's lock) cost ~0.5
// us of the worker's CPU per task in BenchmarkThroughput.
type typeSeries struct {
	label     string
	succeeded atomic.Pointer[counterBox]
	duration  atomic.Pointer[observerBox]
}

type counterBox struct{ prometheus.Counter }
type observerBox struct{ prometheus.Observer }

func newTypeLabels(maxTypes int) *typeLabels {
	return &typeLabels{maxTypes: maxTypes, kept: make(map[string]*typeSeries),
		other: &typeSeries{label: typeOther}, invalid: &typeSeries{label: typeInvalid}}
}

// of is the label value for task type typ.
func (l *typeLabels) of(typ string) string { return l.series(typ).label }

// series is the label of task type typ, with its cached series.
func (l *typeLabels) series(typ string) *typeSeries {
	if typ == typeInvalid {
		return l.invalid
	}
	l.mu.RLock()
	s, ok := l.kept[typ]
	full := len(l.kept) >= l.maxTypes
	l.mu.RUnlock()
	switch {
	case ok:
		return s
	case full || typ == typeOther:
		return l.other
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.kept[typ]; ok {
		return s
	}
	if len(l.kept) >= l.maxTypes {
		return l.other
	}
	s = &typeSeries{label: typ}
	l.kept[typ] = s
	return s
}

type metrics struct {
	types *typeLabels
	// handled and duration are labelled by type: use handledInc and
	// observeDuration, which bound the label.
	handled     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lag         prometheus.Histogram
	retries     prometheus.Counter
	dead        prometheus.Counter
	consumerLag prometheus.Gauge
	running     prometheus.Gauge
	heldBytes   prometheus.Gauge
	rebalances  prometheus.Counter
	commits     *prometheus.CounterVec
	claimWaits  prometheus.Counter
	reclaims    prometheus.Counter

	redisRetries *prometheus.CounterVec // by op: claim, defer, finish, park
	deadErrors   *prometheus.CounterVec // by reason: unknown_topic, too_large, other
	deadDropped  *prometheus.CounterVec // by reason: queue_full, expired, shutdown
	deadQueued   prometheus.Gauge
	slotRenewals *prometheus.CounterVec // by result: ok, lost, error
	slotsLost    *prometheus.CounterVec // by reason: expired, gone

	// parked is labelled by type: use parkedAdd
	parked            *prometheus.CounterVec
	reconcileUnparked prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, maxTypes int) *metrics {
	const ns, sub = admin.Namespace, "work"
	m := &metrics{
		types: newTypeLabels(maxTypes),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "handled_total",
			Help: "Records handled, by task type and outcome (succeeded, retry, dead, skipped_stale, skipped_done, hostile, deferred, parked)."},
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
			Name: "dead_total", Help: "Dead letters written to the dead topic (notifications of dead tasks, and hostile records)."}),
		consumerLag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "consumer_lag", Help: "Records behind the partition end, as the Kafka reader last saw it."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "running", Help: "Records being handled now."}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "held_bytes", Help: "Bytes (key, value, headers) of the records held now: fetched and not yet finished (bounded by DQ_WORK_MAX_HELD_BYTES)."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rebalances_total", Help: "Consumer group generations this worker joined."}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "commits_total", Help: "Offset commits, by result (ok, error)."}, []string{"result"}),
		claimWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "claim_waits_total", Help: "Records that found their execution claimed by another run and waited."}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reclaims_total", Help: "Records claimed again before running because they waited for a handler slot for more than half their claim's TTL."}),
		redisRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "redis_retries_total",
			Help: "Records whose Redis write failed with an error of Redis (unreachable, OOM, READONLY, ...) and was retried, by operation (claim, defer, finish, park)."},
			[]string{"op"}),
		deadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dead_letter_publish_errors_total",
			Help: "Failed writes of dead letters to the dead topic, by reason (unknown_topic, too_large, other). The dead state is in Redis already."},
			[]string{"reason"}),
		deadDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dead_letters_dropped_total",
			Help: "Dead letters given up without being written to the dead topic, by reason (queue_full, expired, shutdown). The dead state is in Redis already."},
			[]string{"reason"}),
		deadQueued: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "dead_letters_queued", Help: "Dead letters waiting to be written to the dead topic."}),
		slotRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "limit_slot_renewals_total",
			Help: "Renewals of the concurrency slots of running handlers, by result (ok, lost, error)."},
			[]string{"result"}),
		slotsLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "limit_slots_lost_total",
			Help: "Concurrency slots lost by tasks admitted with them before their handler returned, by reason (expired: not renewed within the slot's TTL by this process's clock, e.g. a paused process or a slow Redis; gone: a renewal found it expired or released). The handler's context is cancelled with worker.ErrLimitSlotLost."},
			[]string{"reason"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "parked_total",
			Help: "Tasks parked in Redis because their type is paused (no attempt used), by task type."},
			[]string{"type"}),
		reconcileUnparked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "pause_reconcile_unparked_total",
			Help: "Parked tasks of types no longer paused that this worker's reconciler unparked (a park that landed after its type's resume)."}),
	}
	if reg != nil {
		reg.MustRegister(m.handled, m.duration, m.lag, m.retries, m.dead, m.consumerLag, m.running, m.heldBytes,
			m.rebalances, m.commits, m.claimWaits, m.reclaims,
			m.redisRetries, m.deadErrors, m.deadDropped, m.deadQueued, m.slotRenewals, m.slotsLost,
			m.parked, m.reconcileUnparked)
	}
	return m
}

// handledInc counts one record of task type typ with outcome.
func (m *metrics) handledInc(typ, outcome string) {
	s := m.types.series(typ)
	if outcome != outSucceeded {
		m.handled.WithLabelValues(s.label, outcome).Inc()
		return
	}
	b := s.succeeded.Load()
	if b == nil {
		b = &counterBox{m.handled.WithLabelValues(s.label, outSucceeded)}
		s.succeeded.Store(b) // a concurrent first use stores the same series
	}
	b.Inc()
}

// observeDuration records how long a handler of task type typ ran, with
// exemplar ex when not nil.
func (m *metrics) observeDuration(typ string, seconds float64, ex prometheus.Labels) {
	s := m.types.series(typ)
	b := s.duration.Load()
	if b == nil {
		b = &observerBox{m.duration.WithLabelValues(s.label)}
		s.duration.Store(b)
	}
	observe(b.Observer, seconds, ex)
}

// parkedAdd counts n tasks of type typ parked.
func (m *metrics) parkedAdd(typ string, n int) {
	if n > 0 {
		m.parked.WithLabelValues(m.types.of(typ)).Add(float64(n))
	}
}
