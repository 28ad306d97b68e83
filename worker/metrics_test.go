package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// The type label is kept for at most MetricsMaxTypes task types (default
// 100); tasks of the other types are counted under type="_other", so 300
// types make at most 101 label values per metric, and nothing is lost from
// the totals.
func TestMetricTypeLabelsAreBounded(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { return nil })
	})
	const n = 300
	var tasks []*task.Task
	var ids []string
	for i := range n {
		id := "typed-" + itoa(i)
		tasks = append(tasks, newTask(id, "type-"+itoa(i)))
		ids = append(ids, id)
	}
	worktest.Fire(t, e.Firer, tasks...)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"delayq_work_handled_total", "delayq_work_handler_duration_seconds"} {
		types := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "type" {
						v := m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
						types[lp.GetValue()] += v
					}
				}
			}
		}
		total := 0.0
		for _, v := range types {
			total += v
		}
		if len(types) > worker.DefaultMetricsMaxTypes+1 || types["_other"] != n-worker.DefaultMetricsMaxTypes || total != n {
			t.Errorf("%s: %d type label values, _other %v, total %v; want at most %d, %d, %d",
				name, len(types), types["_other"], total, worker.DefaultMetricsMaxTypes+1, n-worker.DefaultMetricsMaxTypes, n)
		}
	}
}
