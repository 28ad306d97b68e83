package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
)

// memory is workload 2: INFO memory used_memory of an empty Redis, then
// after MemTasks pending tasks (due in 1 h). delayq's delta includes its
// namespace's fixed keys, asynq's its queue keys.
func (b *bench) memory() {
	n := b.p.MemTasks
	{
		scope := b.scope("memory-delayq")
		m0 := b.usedMemory()
		d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{})
		calls := n / batchSize
		c := run(batchWorkers, calls, func(int) error {
			return post(d.HTTP, d.Base+"/v1/tasks/batch", dqBatchBody(batchSize, "1h"), http.StatusOK)
		})
		m1 := b.usedMemory()
		stored := int64(-1)
		if st, err := d.Client.Stats(b.ctx()); err == nil {
			stored = st.Totals.Scheduled
		}
		b.addMemory(report.DelayQ, fmt.Sprintf("API batch of %d, %d clients (bodies built while the clock runs)", batchSize, batchWorkers), calls*batchSize, stored, m0, m1, c)
		scope.Close()
	}
	{
		scope := b.scope("memory-asynq")
		m0 := b.usedMemory()
		a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{PoolSize: asynqPool})
		c := run(asynqWideConc, n, func(int) error {
			_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(uuid.NewString()), asynq.ProcessIn(time.Hour))
			return err
		})
		m1 := b.usedMemory()
		stored := int64(-1)
		if qi, err := a.Inspector.GetQueueInfo(a.Queue); err == nil {
			stored = int64(qi.Scheduled)
		}
		b.addMemory(report.Asynq, fmt.Sprintf("Enqueue + ProcessIn(1h), %d goroutines", asynqWideConc), n, stored, m0, m1, c)
		scope.Close()
	}
}

func (b *bench) usedMemory() int64 {
	m, err := b.in.UsedMemory(b.ctx())
	if err != nil {
		b.tb.Fatalf("memory: %v", err)
	}
	return m
}

func (b *bench) addMemory(system, method string, tasks int, stored, m0, m1 int64, c calls) {
	mm := report.Memory{
		System: system, Tasks: tasks, Stored: stored, UsedBefore: m0, UsedAfter: m1,
		BytesPerTask: float64(m1-m0) / float64(max(stored, 1)),
		TasksPerSec:  float64(tasks) / c.elapsed.Seconds(), Method: method,
	}
	b.r.Memory = append(b.r.Memory, mm)
	fmt.Printf("%-8s %d tasks stored of %d: used_memory %d -> %d = %.1f bytes/task (%s, %.0f tasks/s)\n",
		system, stored, tasks, m0, m1, mm.BytesPerTask, method, mm.TasksPerSec)
	if c.errs > 0 {
		b.note("memory %s: %d calls failed, first: %v", system, c.errs, c.firstErr)
	}
}
