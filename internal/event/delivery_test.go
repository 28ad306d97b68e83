package event

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// TestDeliveryEveryTaskOnTimeFromTwoProcesses: 20,000 tasks due over 5s
// across 16 shards, fired by two event processes, all reach Kafka at least
// once, none before its due time, with the pinned record.
func TestDeliveryEveryTaskOnTimeFromTwoProcesses(t *testing.T) {
	const n = 20000
	w := newWorld(t, 16)
	recs := w.collect(task.DefaultTopic)
	a := w.startApp("deliver-a")
	b := w.startApp("deliver-b")
	got := w.waitBalanced(15*time.Second, a, b)
	say(t, "shards per process: %v", got)
	for _, ap := range []*app{a, b} {
		resp, err := http.Get("http://" + ap.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /readyz = %d %v", ap.ProcessID(), resp.StatusCode, body)
		}
	}

	// Scheduled in due order, chunk by chunk, while the first ones already
	// fire; every chunk is in Redis before its due time (scheduling runs at
	// about 6,000 tasks/s under -race, the tasks fall due at 4,000/s).
	start := time.Now().Add(2 * time.Second)
	tasks := w.scheduleSpread("deliver", n, start, 5*time.Second)
	if late := time.Since(start.Add(5 * time.Second)); late > 0 {
		t.Logf("scheduling finished %v after the last due time: lag figures include it", late)
	}
	waitAll(t, recs, tasks, 30*time.Second)
	r := check(tasks, recs.ByID())
	r.fail(t)
	p50, p99, mx := quantiles(r.lags)
	say(t, "delivery: %d tasks, %d records, %d duplicates; lag (record timestamp - due, ms resolution) p50=%v p99=%v max=%v",
		r.tasks, r.records, r.dups, p50, p99, mx)
	fired := metric(t, a.Addr(), "delayq_fired_total") + metric(t, b.Addr(), "delayq_fired_total")
	say(t, "fired_total over both processes: %v (a %v, b %v)", fired,
		metric(t, a.Addr(), "delayq_fired_total"), metric(t, b.Addr(), "delayq_fired_total"))
	if fired < n {
		t.Errorf("fired_total %v < %d", fired, n)
	}
	if metric(t, a.Addr(), "delayq_fire_lag_seconds_count") == 0 || metric(t, b.Addr(), "delayq_shards_led") == 0 {
		t.Error("lag histogram or shards_led not exported")
	}
}
