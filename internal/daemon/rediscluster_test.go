package daemon

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/testenv"
)

// DQ_REDIS_ADDRS with the one address of a Redis Cluster of one master (a
// cluster's endpoint): a batch over every shard and concurrent single
// schedules are written (the node refuses a script whose keys span slots,
// which is what a daemon that packed shards met: 500 on every schedule).
func TestOneAddressOfAOneMasterCluster(t *testing.T) {
	app := startApp(t, testConfig(t, testenv.StartRedisClusterN(t, 1).Addrs[0]))
	items := make([]string, 64)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":"b%d","type":"x","delay":"1h"}`, i)
	}
	rp := app.do("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(items, ",")+`]}`)
	if rp.Status != 200 || strings.Count(string(rp.Raw), `"created"`) != len(items) {
		t.Fatalf("batch: %d %s", rp.Status, rp.Raw)
	}
	errs := make(chan string, 32)
	for i := range cap(errs) {
		go func() {
			rp := app.do("POST", "/v1/tasks", fmt.Sprintf(`{"id":"s%d","type":"x","delay":"1h"}`, i))
			if rp.Status != 201 {
				errs <- fmt.Sprintf("s%d: %d %s", i, rp.Status, rp.Raw)
				return
			}
			errs <- ""
		}()
	}
	for range cap(errs) {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	if st := app.stats(); st.Totals.Scheduled != int64(len(items)+cap(errs)) {
		t.Errorf("scheduled %d, want %d", st.Totals.Scheduled, len(items)+cap(errs))
	}
}

// One address of a cluster of several masters without DQ_REDIS_CLUSTER is
// a configuration error: the daemon does not start, and says what to set
// (it would otherwise journal every schedule for ever, MOVED on most
// shards).
func TestOneAddressOfAClusterOfSeveralMasters(t *testing.T) {
	cl := testenv.StartRedisClusterN(t, 2)
	cfg := testConfig(t, cl.Addrs[0])
	if _, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "DQ_REDIS_CLUSTER") {
		t.Fatalf("New: %v, want an error naming DQ_REDIS_CLUSTER", err)
	}
	cfg.RedisCluster = true
	app := startApp(t, cfg)
	if rp := app.do("POST", "/v1/tasks", `{"id":"c1","type":"x","delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("with DQ_REDIS_CLUSTER: %d %s", rp.Status, rp.Raw)
	}
}
