package main

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/stats"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/client"
)

// spike is workloads 4 and 6: SpikeTasks tasks due at the same instant,
// delayq with one and with two event processes (16 shards), asynq with
// its default configuration. The instant is a whole second far enough
// ahead for scheduling to finish (estimated from workload 1's rates):
// asynq keeps due times in whole seconds, so a whole second is its best
// case.
func (b *bench) spike() {
	n := b.p.SpikeTasks
	for _, events := range []int{1, 2} {
		cfg := report.ConfigEvent1
		if events == 2 {
			cfg = report.ConfigEvent2
		}
		scope := b.scope("spike-delayq-" + cfg)
		rec := systems.NewRecorder(n)
		d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{Events: events, Record: rec})
		due := dueAfter(n, b.rate(report.LabelDQClientBatch, 20000))
		ids := ids(n)
		t0 := time.Now()
		c := run(batchWorkers, n/batchSize, func(i int) error {
			tasks := make([]client.Task, batchSize)
			for j := range tasks {
				id := ids[i*batchSize+j]
				rec.Expect(id, due)
				tasks[j] = client.Task{ID: id, Type: taskType, Payload: payloadJSON, DueAt: due}
			}
			return scheduleBatch(b, d.Client, tasks)
		})
		b.finishSpike(report.DelayQ, cfg, events, n, t0, due, c, rec, measuredAtDQ)
		scope.Close()
	}
	{
		scope := b.scope("spike-asynq")
		rec := systems.NewRecorder(n)
		a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{Serve: true, Record: rec, Concurrency: asynqServeConc, PoolSize: asynqPool})
		due := dueAfter(n, b.rate(report.LabelAQEnqueue64, 10000))
		ids := ids(n)
		t0 := time.Now()
		c := run(asynqWideConc, n, func(i int) error {
			rec.Expect(ids[i], due)
			_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(ids[i]), asynq.ProcessAt(due))
			return err
		})
		b.finishSpike(report.Asynq, report.ConfigDefault, 0, n, t0, due, c, rec, measuredAtAQ)
		scope.Close()
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = uuid.NewString()
	}
	return out
}

// dueAfter is the first whole second after scheduling n tasks at rate
// would take twice as long, plus one second.
func dueAfter(n int, rate float64) time.Time {
	est := time.Duration(2 * float64(n) / rate * float64(time.Second))
	return time.Now().Add(est + time.Second).Truncate(time.Second).Add(time.Second)
}

func (b *bench) finishSpike(system, config string, events, n int, t0, due time.Time, c calls, rec *systems.Recorder, measuredAt string) {
	scheduled := time.Now()
	if c.errs > 0 {
		b.note("spike %s %s: %d schedule calls failed, first: %v", system, config, c.errs, c.firstErr)
	}
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
	cpu0, err0 := b.in.RedisCPU(b.ctx())
	ok := rec.WaitDistinct(n, due.Add(3*time.Minute))
	cpu1, err1 := b.in.RedisCPU(b.ctx())
	cpuWindow := time.Since(due)
	res := rec.Result()
	first, last := rec.SeenSpan()
	drain := last.Sub(due)
	s := report.Spike{
		System: system, Config: config, Events: events, Tasks: n,
		ScheduleS: scheduled.Sub(t0).Seconds(), SlackS: due.Sub(scheduled).Seconds(),
		FirstS: first.Sub(due).Seconds(), DrainS: drain.Seconds(), DrainRate: float64(len(res.Visible)) / drain.Seconds(),
		FlowRate:   float64(len(res.Visible)) / last.Sub(first).Seconds(),
		MeasuredAt: measuredAt, Lag: stats.Summarize(res.Visible), Missing: res.Missing, Duplicates: res.Duplicates,
		CDF: stats.CDF(stats.Sorted(res.Visible), cdfPoints),
	}
	if err0 == nil && err1 == nil {
		s.RedisCPU = (cpu1 - cpu0).Seconds() / cpuWindow.Seconds()
	}
	b.r.Spike = append(b.r.Spike, s)
	fmt.Printf("%-6s %-8s %d tasks scheduled in %.1fs (%.1fs before due): first visible after %.2fs, drained in %.2fs = %.0f tasks/s (%.0f/s from first to last); lag p50 %.0fms p99 %.0fms max %.0fms, early %.2f%%, missing %d, dups %d; redis-server at %.0f%% of a core\n",
		system, config, n, s.ScheduleS, s.SlackS, s.FirstS, s.DrainS, s.DrainRate, s.FlowRate, s.Lag.P50ms, s.Lag.P99ms, s.Lag.MaxMs, 100*s.Lag.EarlyShare, s.Missing, s.Duplicates, 100*s.RedisCPU)
	if s.SlackS < 0 {
		b.note("spike %s %s: scheduling ended %.1fs after the due instant; the lag includes scheduling", system, config, -s.SlackS)
	}
	if !ok {
		b.note("spike %s %s: %d tasks not visible 3 minutes after the due instant", system, config, s.Missing)
	}
}
