package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// throughput is workload 1: tasks due in 1 h, scheduled as fast as each
// method allows; a fresh Redis (FLUSHALL) and a fresh daemon per method.
func (b *bench) throughput() {
	p := b.p
	b.dqThroughput(report.LabelDQHTTPSingle, fmt.Sprintf("API POST /v1/tasks, %d clients", singleWorkers), singleWorkers, p.SingleTasks, 1,
		func(d *systems.DelayQ, n int) func(int) error {
			bodies := make([][]byte, n)
			for i := range bodies {
				bodies[i] = dqBody("1h")
			}
			return func(i int) error { return post(d.HTTP, d.Base+"/v1/tasks", bodies[i], http.StatusCreated) }
		})
	b.dqThroughput(report.LabelDQHTTPBatch, fmt.Sprintf("API POST /v1/tasks/batch, %d tasks/request, %d clients", batchSize, batchWorkers), batchWorkers, p.BatchTasks, batchSize,
		func(d *systems.DelayQ, n int) func(int) error {
			bodies := make([][]byte, n)
			for i := range bodies {
				bodies[i] = dqBatchBody(batchSize, "1h")
			}
			return func(i int) error { return post(d.HTTP, d.Base+"/v1/tasks/batch", bodies[i], http.StatusOK) }
		})
	b.dqClientSingle()
	// the same calls, each its own request: what the client's coalescing
	// of concurrent calls (client/coalesce.go) gains, in the same run
	b.dqThroughput(report.LabelDQClientSingleAlone, fmt.Sprintf("Go client Schedule, %d goroutines, one request per call", singleWorkers), singleWorkers, p.SingleTasks, 1,
		func(d *systems.DelayQ, n int) func(int) error {
			alone := client.New(d.Base, client.WithHTTPClient(d.HTTP), client.WithoutScheduleCoalescing())
			tasks := make([]client.Task, n)
			for i := range tasks {
				tasks[i] = dqTask(time.Hour)
			}
			return func(i int) error {
				r, err := alone.Schedule(b.ctx(), tasks[i])
				if err == nil && r.Journaled() {
					err = fmt.Errorf("task %s journaled", r.ID)
				}
				return err
			}
		})
	b.dqEmbeddedSingle()
	b.dqEmbeddedWide()
	b.dqThroughput(report.LabelDQClientBatch, fmt.Sprintf("Go client ScheduleBatch, %d tasks/call, %d goroutines", batchSize, batchWorkers), batchWorkers, p.BatchTasks, batchSize,
		func(d *systems.DelayQ, n int) func(int) error {
			batches := make([][]client.Task, n)
			for i := range batches {
				batches[i] = make([]client.Task, batchSize)
				for j := range batches[i] {
					batches[i][j] = dqTask(time.Hour)
				}
			}
			return func(i int) error { return scheduleBatch(b, d.Client, batches[i]) }
		})
	b.aqSingle()
	b.aqWide()
	b.singleRounds()
}

// singleRounds measures the single-task rows (the ratios issue 46 sets
// bars for, report.SingleRatios) b.rounds-1 more times, asynq's rows
// first in even rounds and delayq's first in odd ones (round 1 above runs
// delayq's first): on a small VM the rate drifts by a quarter within
// minutes, so one pass of each says little about their ratio.
func (b *bench) singleRounds() {
	dq := []func(){b.dqEmbeddedSingle, b.dqEmbeddedWide, b.dqClientSingle}
	aq := []func(){b.aqSingle, b.aqWide}
	for k := 2; k <= b.rounds; k++ {
		fmt.Printf("# single-task rows, round %d of %d\n", k, b.rounds)
		rd := report.Round{Round: k}
		b.rows = &rd.Rows
		first, second := dq, aq
		if k%2 == 0 {
			first, second = aq, dq
		}
		for _, row := range append(first, second...) {
			row()
		}
		b.rows = nil
		b.r.Rounds = append(b.r.Rounds, rd)
	}
}

// dqClientSingle is the Go client's Schedule from 16 goroutines (its
// concurrent calls coalesced into batch requests, client/coalesce.go).
func (b *bench) dqClientSingle() {
	b.dqThroughput(report.LabelDQClientSingle, fmt.Sprintf("Go client Schedule, %d goroutines", singleWorkers), singleWorkers, b.p.SingleTasks, 1,
		func(d *systems.DelayQ, n int) func(int) error {
			tasks := make([]client.Task, n)
			for i := range tasks {
				tasks[i] = dqTask(time.Hour)
			}
			return func(i int) error {
				r, err := d.Client.Schedule(b.ctx(), tasks[i])
				if err == nil && r.Journaled() {
					err = fmt.Errorf("task %s journaled", r.ID)
				}
				return err
			}
		})
}

func (b *bench) dqEmbeddedSingle() {
	b.dqEmbeddedThroughput(report.LabelDQEmbeddedSingle, singleWorkers, b.p.SingleTasks)
}

// dqEmbeddedWide: as many callers as asynq's x64 row; a closed loop of
// callers that each wait for their answer makes the coalescer's groups as
// large as the callers are many.
func (b *bench) dqEmbeddedWide() {
	b.dqEmbeddedThroughput(report.LabelDQEmbeddedWide, asynqWideConc, b.p.BatchTasks)
}

func (b *bench) aqSingle() {
	b.aqThroughput(report.LabelAQEnqueue16, fmt.Sprintf("Enqueue + ProcessIn(1h), %d goroutines", singleWorkers), singleWorkers, b.p.SingleTasks)
}

func (b *bench) aqWide() {
	b.aqThroughput(report.LabelAQEnqueue64, fmt.Sprintf("Enqueue + ProcessIn(1h), %d goroutines (no batch API in asynq %s)", asynqWideConc, b.r.Machine.AsynqVersion), asynqWideConc, b.p.BatchTasks)
}

// dqThroughput measures one delayq method: prepare builds the calls
// (before the clock starts) for calls of perCall tasks.
func (b *bench) dqThroughput(label, method string, workers, tasks, perCall int, prepare func(d *systems.DelayQ, calls int) func(int) error) {
	scope := b.scope("throughput-" + label)
	defer scope.Close()
	d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{})
	n := tasks / perCall
	fn := prepare(d, n)
	m0 := b.cpuNow()
	c := run(workers, n, fn)
	m1 := b.cpuNow()
	stored := int64(-1)
	if st, err := d.Client.Stats(b.ctx()); err == nil {
		stored = st.Totals.Scheduled
	}
	b.addThroughput(report.DelayQ, label, method, workers, n*perCall, perCall, c, stored, m0, m1)
}

// dqEmbeddedThroughput is the single schedule of a producer that runs the
// daemon in its own process (package embedded): Producer.Schedule from
// workers goroutines, on a fresh namespace of the same Redis.
func (b *bench) dqEmbeddedThroughput(label string, workers, tasks int) {
	scope := b.scope("throughput-" + label)
	defer scope.Close()
	p := systems.StartEmbedded(scope, b.in, 0)
	ts := make([]client.Task, tasks)
	for i := range ts {
		ts[i] = dqTask(time.Hour)
	}
	m0 := b.cpuNow()
	c := run(workers, tasks, func(i int) error {
		r, err := p.Schedule(b.ctx(), ts[i])
		if err == nil && r.Journaled() {
			err = fmt.Errorf("task %s journaled", r.ID)
		}
		return err
	})
	m1 := b.cpuNow()
	stored := int64(-1)
	if st, err := p.Client().Stats(b.ctx()); err == nil {
		stored = st.Totals.Scheduled
	}
	b.addThroughput(report.DelayQ, label,
		fmt.Sprintf("embedded.Producer Schedule, %d goroutines", workers), workers, tasks, 1, c, stored, m0, m1)
}

func (b *bench) aqThroughput(label, method string, workers, tasks int) {
	scope := b.scope("throughput-" + label)
	defer scope.Close()
	a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{PoolSize: asynqPool})
	tasksIDs := make([]string, tasks)
	for i := range tasksIDs {
		tasksIDs[i] = uuid.NewString()
	}
	m0 := b.cpuNow()
	c := run(workers, tasks, func(i int) error {
		_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(tasksIDs[i]), asynq.ProcessIn(time.Hour))
		return err
	})
	m1 := b.cpuNow()
	stored := int64(-1)
	if qi, err := a.Inspector.GetQueueInfo(a.Queue); err == nil {
		stored = int64(qi.Scheduled)
	}
	b.addThroughput(report.Asynq, label, method, workers, tasks, 1, c, stored, m0, m1)
}

func (b *bench) addThroughput(system, label, method string, workers, tasks, perCall int, c calls, stored int64, m0, m1 cpuMark) {
	p50, p99 := c.quantilesMs()
	redisUs, procUs := perTask(m0, m1, tasks)
	t := report.Throughput{
		System: system, Method: method, Label: label, Tasks: tasks, Workers: workers, PerCall: perCall,
		TasksPerSec: float64(tasks-c.errs*perCall) / c.elapsed.Seconds(),
		CallP50ms:   p50, CallP99ms: p99, Errors: c.errs, Stored: stored,
		RedisCPUus: redisUs, ProcCPUus: procUs,
	}
	if b.rows != nil { // a later round of the single-task rows
		*b.rows = append(*b.rows, t)
	} else {
		b.r.Throughput = append(b.r.Throughput, t)
	}
	fmt.Printf("%-8s %-70s %8.0f tasks/s  call p50 %.2fms p99 %.2fms  CPU/task redis %.1fµs process %.1fµs  errors %d  stored %d\n",
		system, method, t.TasksPerSec, p50, p99, redisUs, procUs, c.errs, stored)
	fmt.Printf("%-8s   redis-server per task, by command (INFO commandstats; evalsha includes what its scripts call): %s\n",
		"", testenv.CommandStatsDelta(m0.cmds, m1.cmds, tasks))
	if c.errs > 0 {
		b.note("%s %s: %d of %d calls failed, first: %v", system, method, c.errs, len(c.lat), c.firstErr)
	}
	if stored >= 0 && stored != int64(tasks-c.errs*perCall) {
		b.note("%s %s: %d tasks stored after scheduling %d", system, method, stored, tasks)
	}
}
