package testenv

import "github.com/prometheus/client_golang/prometheus"

// MetricValue is the value of metric name in g summed over the series
// whose labels include every name, value pair of labels: a counter's or a
// gauge's value, a histogram's sample count. found is false when no series
// matches (a labelled counter never incremented is not gathered). A
// registry that cannot be gathered is a bug of the test: it panics.
func MetricValue(g prometheus.Gatherer, name string, labels ...string) (v float64, found bool) {
	mfs, err := g.Gather()
	if err != nil {
		panic("testenv: gather metrics: " + err.Error())
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			found = true
			switch {
			case m.GetHistogram() != nil:
				v += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				v += m.GetGauge().GetValue()
			default:
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v, found
}
