package admin

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/config"
)

// The Redis failover metrics that config's clients export use the metric
// namespace like every other delayq metric.
func TestRedisHAMetricsUseTheNamespace(t *testing.T) {
	c := config.Common{RedisAddrs: []string{"127.0.0.1:1"}}
	rdb, ha, err := c.RedisClientHA(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ch := make(chan *prometheus.Desc, 16)
	ha.Describe(ch)
	close(ch)
	n := 0
	for d := range ch {
		n++
		if !strings.Contains(d.String(), `fqName: "`+Namespace+`_`) {
			t.Errorf("%s: not in the namespace %q", d, Namespace)
		}
	}
	if n == 0 {
		t.Fatal("no metric described")
	}
}
