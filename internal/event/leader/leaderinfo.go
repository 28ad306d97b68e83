package leader

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// leaderInfo exports delayq_shard_leader_info{shard,process} 1 for each
// shard this process leads, read from the manager's own view when scraped
// (so the series appear and vanish with leadership, and no stale series
// of a shard given back is left behind). Across processes,
// count by (shard) (delayq_shard_leader_info) is the number of leaders a
// shard has: 0 is a shard without a leader; 2 only for the moment of a
// handover, until the old leader notices it lost the shard.
type leaderInfo struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	process string       // the manager's process id ("" until attached)
	leading func() []int // nil until attached
}

func newLeaderInfo() *leaderInfo {
	return &leaderInfo{desc: prometheus.NewDesc(admin.Namespace+"_shard_leader_info",
		"1 for each shard this process leads (label process: its process id in etcd).",
		[]string{"shard", "process"}, nil)}
}

// attach makes the collector report what leading answers, under the
// process id process.
func (l *leaderInfo) attach(process string, leading func() []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.process, l.leading = process, leading
}

// Describe implements prometheus.Collector.
func (l *leaderInfo) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect implements prometheus.Collector.
func (l *leaderInfo) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	process, leading := l.process, l.leading
	l.mu.Unlock()
	if leading == nil {
		return
	}
	for _, s := range leading() {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, 1, strconv.Itoa(s), process)
	}
}
