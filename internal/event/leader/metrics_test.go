package leader

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// lockCheckedGauge fails the test when the gauge is set while the
// manager's lock is free: a value set after the lock was released can be
// overtaken by a later change and leave the gauge stale.
type lockCheckedGauge struct {
	prometheus.Gauge
	t  *testing.T
	mu *sync.Mutex
}

func (g lockCheckedGauge) Set(v float64) {
	if g.mu.TryLock() {
		g.mu.Unlock()
		g.t.Errorf("shards_led set to %v outside the manager's lock", v)
	}
	g.Gauge.Set(v)
}

// TestShardsLedAgreesWithLeading: delayq_shards_led is set under the lock
// of the change it reports, so after any interleaving of changes it equals
// the manager's own view.
func TestShardsLedAgreesWithLeading(t *testing.T) {
	m := &Manager{leading: map[int]int64{}}
	met := NewMetrics(prometheus.NewRegistry())
	m.m = &Metrics{ShardsLed: lockCheckedGauge{met.ShardsLed, t, &m.mu}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				shard := (w*7 + i) % 16
				m.setLeading(shard, int64(i), i%3 != 0)
			}
		})
	}
	wg.Wait()
	if got, want := gaugeValue(t, met.ShardsLed), float64(len(m.Leading())); got != want {
		t.Fatalf("shards_led %v, manager leads %v shards", got, want)
	}
	m.clearLeading()
	if got := gaugeValue(t, met.ShardsLed); got != 0 || len(m.Leading()) != 0 {
		t.Fatalf("after clear: shards_led %v, leading %v", got, m.Leading())
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
