package registry

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum returns a Config.Counters that reads g and, for each entry of
// names (selector -> counter key), sums the selected samples: a counter's
// or gauge's value, a histogram's count. A selector is a metric family
// name, optionally with one label's value: "delayq_work_handled_total"
// sums every label set, "delayq_work_handled_total/outcome=succeeded"
// only those. A family g does not have (yet) is left out.
func Sum(g prometheus.Gatherer, names map[string]string) func() map[string]float64 {
	type sel struct{ label, value, key string }
	byFamily := map[string][]sel{}
	for s, key := range names {
		family, lv, _ := strings.Cut(s, "/")
		l, v, _ := strings.Cut(lv, "=")
		byFamily[family] = append(byFamily[family], sel{l, v, key})
	}
	return func() map[string]float64 {
		mfs, _ := g.Gather() // a partial gather still counts what it read
		out := make(map[string]float64, len(names))
		for _, mf := range mfs {
			for _, s := range byFamily[mf.GetName()] {
				var v float64
				for _, m := range mf.GetMetric() {
					if s.label == "" || hasLabel(m, s.label, s.value) {
						v += value(m)
					}
				}
				out[s.key] = v
			}
		}
		return out
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue() == value
		}
	}
	return false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
