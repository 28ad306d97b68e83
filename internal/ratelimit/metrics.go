package ratelimit

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// metrics are the limiter's Prometheus collectors. Only types that have a
// rule get label values, so cardinality is bounded by the number of rules;
// a type's gauges are dropped when its rule disappears.
type metrics struct {
	admitted *prometheus.CounterVec
	deferred *prometheus.CounterVec
	tokens   *prometheus.GaugeVec
	window   *prometheus.GaugeVec
	running  *prometheus.GaugeVec

	types sync.Map // type -> *typeMetrics
}

// typeMetrics caches one type's children (WithLabelValues costs a hash and
// a lock per call).
type typeMetrics struct {
	admitted prometheus.Counter
	deferred [numReasons]prometheus.Counter // by reason code 1..4

	mu     sync.Mutex
	gauged [3]bool // tokens, window, running currently exported
}

// reasons are the deferred counter's reason labels, by reason code 1..4
// (admit.lua, admitkeyed.lua). A fixed set: a rule with a key or header
// scope adds no label per value, however many values it limits.
var reasons = [numReasons]string{ReasonWindowQuota, ReasonTokenBucket, ReasonConcurrency, ReasonOrder}

const numReasons = 4

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Subsystem: "limit", Name: "admitted_total",
			Help: "Tasks of a rate-limited type admitted to run.",
		}, []string{"type"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Subsystem: "limit", Name: "deferred_total",
			Help: "Tasks deferred by a rate limit, by the limit that held them back (window_quota, token_bucket, concurrency; order: an earlier task of its key waits).",
		}, []string{"type", "reason"}),
		tokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Subsystem: "limit", Name: "tokens",
			Help: "Tokens left in the type's bucket at this process's last check.",
		}, []string{"type"}),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Subsystem: "limit", Name: "window_count",
			Help: "Tasks admitted in the type's current quota window at this process's last check.",
		}, []string{"type"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Subsystem: "limit", Name: "running",
			Help: "Concurrency slots of the type held across all workers at this process's last check.",
		}, []string{"type"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.admitted, err = register(reg, m.admitted)
	if err != nil {
		return nil, err
	}
	if m.deferred, err = register(reg, m.deferred); err != nil {
		return nil, err
	}
	if m.tokens, err = register(reg, m.tokens); err != nil {
		return nil, err
	}
	if m.window, err = register(reg, m.window); err != nil {
		return nil, err
	}
	if m.running, err = register(reg, m.running); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description (a second Limiter on one registry shares it).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *metrics) of(typ string) *typeMetrics {
	if v, ok := m.types.Load(typ); ok {
		return v.(*typeMetrics)
	}
	tm := &typeMetrics{admitted: m.admitted.WithLabelValues(typ)}
	for i, r := range reasons {
		tm.deferred[i] = m.deferred.WithLabelValues(typ, r)
	}
	v, _ := m.types.LoadOrStore(typ, tm)
	return v.(*typeMetrics)
}

// observe records one decided group and the state the script reported.
// gauges is false for a rule with a key or header scope: its state is per
// value, and a gauge per value would grow without bound, so the type's
// gauges are not exported (dropped if they were).
func (m *metrics) observe(typ string, rule Rule, admitted int, deferred [numReasons]int, st state, gauges bool) {
	tm := m.of(typ)
	if admitted > 0 {
		tm.admitted.Add(float64(admitted))
	}
	for i, n := range deferred {
		if n > 0 {
			tm.deferred[i].Add(float64(n))
		}
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	m.gauge(tm, 0, m.tokens, typ, gauges && rule.TokenBucket != nil, st.tokens)
	m.gauge(tm, 1, m.window, typ, gauges && rule.WindowQuota != nil, float64(st.windowCount))
	m.gauge(tm, 2, m.running, typ, gauges && rule.Concurrency != nil, float64(st.running))
}

func (m *metrics) gauge(tm *typeMetrics, i int, g *prometheus.GaugeVec, typ string, set bool, v float64) {
	switch {
	case set:
		g.WithLabelValues(typ).Set(v)
		tm.gauged[i] = true
	case tm.gauged[i]:
		g.DeleteLabelValues(typ)
		tm.gauged[i] = false
	}
}

// forget drops a type whose rule is gone: its gauges would otherwise show
// stale values forever. Counters stay (they are totals).
func (m *metrics) forget(typ string) {
	v, ok := m.types.LoadAndDelete(typ)
	if !ok {
		return
	}
	tm := v.(*typeMetrics)
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for i, g := range []*prometheus.GaugeVec{m.tokens, m.window, m.running} {
		if tm.gauged[i] {
			g.DeleteLabelValues(typ)
		}
	}
}
