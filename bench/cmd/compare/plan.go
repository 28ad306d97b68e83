package main

import (
	"fmt"
	"time"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/bench/internal/tbenv"
)

// plan is the size of every workload.
type plan struct {
	SingleTasks int           // workload 1, one task per call
	BatchTasks  int           // workload 1, batches
	MemTasks    int           // workload 2
	Rates       []int         // workload 3
	SteadyFor   time.Duration // workload 3: how long tasks are scheduled
	Ahead       time.Duration // workload 3: due this far after their tick
	SpikeTasks  int           // workloads 4 and 6
	ChurnTasks  int           // workload 5
	HandleTasks int           // workload 7, tasks ready
	E2ETasks    int           // workload 7, end to end
}

var fullPlan = plan{
	SingleTasks: 20_000,
	BatchTasks:  200_000,
	MemTasks:    1_000_000,
	Rates:       []int{1000, 10000},
	SteadyFor:   20 * time.Second,
	Ahead:       3 * time.Second,
	SpikeTasks:  200_000,
	ChurnTasks:  50_000,
	HandleTasks: 100_000,
	E2ETasks:    100_000,
}

var shortPlan = plan{
	SingleTasks: 4_000,
	BatchTasks:  20_000,
	MemTasks:    100_000,
	Rates:       []int{1000, 10000},
	SteadyFor:   2 * time.Second,
	Ahead:       2 * time.Second,
	SpikeTasks:  20_000,
	ChurnTasks:  10_000,
	HandleTasks: 20_000,
	E2ETasks:    20_000,
}

// Fixed settings of both systems.
const (
	batchSize      = 1000 // delayq tasks per batch call (the daemon's DQ_MAX_BATCH default)
	singleWorkers  = 16   // concurrent callers, one task per call (both systems)
	batchWorkers   = 4    // concurrent delayq batch callers
	steadyWorkers  = 8    // delayq: concurrent batch calls of the open-loop generator
	steadyAQ       = 32   // asynq: concurrent Enqueue calls of the open-loop generator
	asynqWideConc  = 64   // concurrent asynq Enqueue callers standing in for a batch API
	asynqServeConc = 64   // asynq.Config.Concurrency
	asynqPool      = 64   // asynq client Redis pool (go-redis default: 10 per CPU)
	taskType       = "bench"
)

// asynq server configurations of the firing workloads.
var asynqConfigs = []struct {
	name                   string
	delayedCheck, taskPoll time.Duration
}{
	{report.ConfigDefault, 0, 0},
	{report.Config100ms, 100 * time.Millisecond, 100 * time.Millisecond},
}

func settings(p plan) []string {
	return []string{
		"Redis: testenv's redis-server settings for both systems (no persistence, maxmemory-policy noeviction, hash-max-listpack-value 512, hash-max-listpack-entries 256).",
		"Tasks: 36-character UUID ids, type \"bench\", 64-byte payload (delayq: a 64-byte JSON string; asynq: the same 64 bytes), otherwise each system's defaults (delayq 10 attempts; asynq MaxRetry 25, Timeout 30 min).",
		fmt.Sprintf("delayq: daemon and event processes in-process (16 shards, DQ_FIRE_BATCH 500, Kafka batch timeout 1 ms), kfake broker, topic with 4 partitions; batch calls of %d tasks.", batchSize),
		fmt.Sprintf("asynq: Client with a %d-connection pool; Server with Concurrency %d; configs: default = DelayedTaskCheckInterval 5s and TaskCheckInterval 1s (asynq's defaults), 100ms = both set to 100ms.", asynqPool, asynqServeConc),
		fmt.Sprintf("Sizes: throughput %d single / %d batch tasks, memory %d tasks, steady %v at each rate due %v ahead, spike %d tasks, churn %d tasks, handling %d tasks ready / %d end to end.",
			p.SingleTasks, p.BatchTasks, p.MemTasks, p.SteadyFor, p.Ahead, p.SpikeTasks, p.ChurnTasks, p.HandleTasks, p.E2ETasks),
		fmt.Sprintf("Handling: one consumer with a no-op handler and concurrency %d: delayq's worker package (worker.New + Run, in this process, defaults otherwise: CommitInterval 100ms, outcomes in Redis) and one asynq.Server (default intervals).", handleConc),
	}
}

// bench runs the workloads and fills the results.
type bench struct {
	tb    *tbenv.TB
	in    *systems.Infra
	p     plan
	r     *report.Results
	notes []string
	// rounds is how many times the single-task rows run (-rounds);
	// rows, while set, is the later round whose rows addThroughput fills
	rounds int
	rows   *[]report.Throughput
}

func (b *bench) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Println("NOTE: " + msg)
	b.notes = append(b.notes, msg)
}

// scope empties Redis and returns a scope for one system's run; the
// caller closes it.
func (b *bench) scope(name string) *tbenv.TB {
	if err := b.in.FlushAll(b.ctx()); err != nil {
		b.tb.Fatalf("FLUSHALL before %s: %v", name, err)
	}
	return b.tb.Sub(name)
}

// rate is tasks per second of a measured throughput row, or def.
func (b *bench) rate(label string, def float64) float64 {
	for _, t := range b.r.Throughput {
		if t.Label == label && t.TasksPerSec > 0 {
			return t.TasksPerSec
		}
	}
	return def
}
