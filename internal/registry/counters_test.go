package registry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total"}, []string{"outcome"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lag"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "d_seconds"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("succeeded").Add(3)
	c.WithLabelValues("dead").Add(2)
	g.Set(7)
	h.Observe(1)
	h.Observe(2)
	got := Sum(reg, map[string]string{
		"x_total":                   "all",
		"x_total/outcome=succeeded": "ok",
		"x_total/outcome=nope":      "none",
		"lag":                       "lag",
		"d_seconds":                 "n",
		"missing_total":             "missing",
	})()
	want := map[string]float64{"all": 5, "ok": 3, "none": 0, "lag": 7, "n": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
