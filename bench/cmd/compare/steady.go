package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/stats"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/client"
)

const (
	tick      = 10 * time.Millisecond
	cdfPoints = 200
	// measuredAtDQ and measuredAtAQ say where lag is taken.
	measuredAtDQ = "consumer receive time (franz-go PollFetches return) - dq-due-at"
	measuredAtAQ = "handler start - ProcessAt time"
)

// job is the tasks one call schedules.
type job struct {
	ids  []string
	dues []time.Time
}

// loop is the outcome of an open-loop schedule.
type loop struct {
	scheduled int
	errs      int
	firstErr  error
	late      int // tasks whose schedule call returned after their due time
	rate      float64
	lastDue   time.Time
}

// openLoop schedules rate tasks/s for dur, each due ahead after its tick
// (spread evenly over the tick, millisecond precision), whatever the
// schedule calls' latency: ticks are generated on a fixed clock and sent by
// workers; perTask splits a tick into one call per task. Every task is
// recorded in rec before it is sent.
func openLoop(rate int, dur, ahead time.Duration, workers int, perTask bool, rec *systems.Recorder, send func(job) error) loop {
	per := max(1, rate*int(tick)/int(time.Second))
	ticks := int(dur / tick)
	jobs := make(chan job, ticks*per+1)
	var mu sync.Mutex
	var out loop
	var lastDone time.Time
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				err := send(j)
				done := time.Now()
				late := 0
				for _, d := range j.dues {
					if done.After(d) {
						late++
					}
				}
				mu.Lock()
				out.late += late
				if err != nil {
					out.errs += len(j.ids)
					if out.firstErr == nil {
						out.firstErr = err
					}
				}
				if done.After(lastDone) {
					lastDone = done
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now().Add(20 * time.Millisecond)
	for k := range ticks {
		at := start.Add(time.Duration(k) * tick)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		j := job{ids: make([]string, per), dues: make([]time.Time, per)}
		for i := range per {
			j.ids[i] = uuid.NewString()
			j.dues[i] = at.Add(ahead + time.Duration(i)*tick/time.Duration(per)).Truncate(time.Millisecond)
			rec.Expect(j.ids[i], j.dues[i])
		}
		out.lastDue = j.dues[per-1]
		if perTask {
			for i := range per {
				jobs <- job{ids: j.ids[i : i+1], dues: j.dues[i : i+1]}
			}
		} else {
			jobs <- j
		}
		out.scheduled += per
	}
	close(jobs)
	wg.Wait()
	out.rate = float64(out.scheduled) / lastDone.Sub(start).Seconds()
	return out
}

// steady is workload 3: firing lag at each rate, delayq with one event
// process, asynq with its default and its 100ms configuration.
func (b *bench) steady() {
	p := b.p
	for _, rate := range p.Rates {
		{
			scope := b.scope(fmt.Sprintf("steady-delayq-%d", rate))
			rec := systems.NewRecorder(rate * int(p.SteadyFor/time.Second))
			d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{Events: 1, Record: rec})
			l := openLoop(rate, p.SteadyFor, p.Ahead, steadyWorkers, false, rec, func(j job) error {
				tasks := make([]client.Task, len(j.ids))
				for i := range tasks {
					tasks[i] = client.Task{ID: j.ids[i], Type: taskType, Payload: payloadJSON, DueAt: j.dues[i]}
				}
				return scheduleBatch(b, d.Client, tasks)
			})
			b.finishSteady(report.DelayQ, report.ConfigEvent1, rate, l, rec, measuredAtDQ, fmt.Sprintf("Go client ScheduleBatch per %v tick, %d workers", tick, steadyWorkers))
			scope.Close()
		}
		for _, cfg := range asynqConfigs {
			scope := b.scope(fmt.Sprintf("steady-asynq-%s-%d", cfg.name, rate))
			rec := systems.NewRecorder(rate * int(p.SteadyFor/time.Second))
			a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{
				Serve: true, Record: rec, Concurrency: asynqServeConc, PoolSize: asynqPool,
				DelayedTaskCheckInterval: cfg.delayedCheck, TaskCheckInterval: cfg.taskPoll,
			})
			l := openLoop(rate, p.SteadyFor, p.Ahead, steadyAQ, true, rec, func(j job) error {
				_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(j.ids[0]), asynq.ProcessAt(j.dues[0]))
				return err
			})
			b.finishSteady(report.Asynq, cfg.name, rate, l, rec, measuredAtAQ, fmt.Sprintf("Enqueue + ProcessAt, %d workers", steadyAQ))
			scope.Close()
		}
	}
}

// finishSteady waits for every task (at most 20 s after the last due
// time) and records the run.
func (b *bench) finishSteady(system, config string, rate int, l loop, rec *systems.Recorder, measuredAt, how string) {
	want := l.scheduled - l.errs
	rec.WaitDistinct(want, l.lastDue.Add(20*time.Second))
	res := rec.Result()
	sorted := stats.Sorted(res.Visible)
	lg := report.Lag{
		System: system, Config: config, Rate: rate, DurationS: b.p.SteadyFor.Seconds(), AheadS: b.p.Ahead.Seconds(),
		Scheduled: l.scheduled, SendErrors: l.errs, ScheduleRate: l.rate, LateSends: l.late,
		MeasuredAt: measuredAt, Lag: stats.Summarize(res.Visible), Missing: res.Missing - l.errs,
		Duplicates: res.Duplicates, CDF: stats.CDF(sorted, cdfPoints),
	}
	if len(res.Stamp) > 0 {
		s := stats.Summarize(res.Stamp)
		lg.RecordTS = &s
		t := stats.Summarize(res.Transit)
		lg.Transit = &t
	}
	b.r.Steady = append(b.r.Steady, lg)
	fmt.Printf("%-6s %-8s %5d/s (achieved %.0f/s, %d sends after due, %s): lag p50 %.1fms p99 %.1fms p99.9 %.1fms max %.1fms, early %.2f%% (max %.0fms), missing %d, dups %d\n",
		system, config, rate, l.rate, l.late, how, lg.Lag.P50ms, lg.Lag.P99ms, lg.Lag.P999ms, lg.Lag.MaxMs, 100*lg.Lag.EarlyShare, lg.Lag.EarlyMaxMs, lg.Missing, lg.Duplicates)
	if lg.RecordTS != nil {
		fmt.Printf("       at the Kafka record timestamp instead: p50 %.1fms p99 %.1fms max %.1fms, early %.2f%%\n",
			lg.RecordTS.P50ms, lg.RecordTS.P99ms, lg.RecordTS.MaxMs, 100*lg.RecordTS.EarlyShare)
		fmt.Printf("       record timestamp -> consumer (the produce call and the fetch): p50 %.1fms p99 %.1fms p99.9 %.1fms max %.1fms\n",
			lg.Transit.P50ms, lg.Transit.P99ms, lg.Transit.P999ms, lg.Transit.MaxMs)
	}
	if l.errs > 0 {
		b.note("steady %s %s %d/s: %d tasks could not be scheduled, first error: %v", system, config, rate, l.errs, l.firstErr)
	}
	if lg.Missing > 0 {
		b.note("steady %s %s %d/s: %d tasks not visible 20 s after the last due time", system, config, rate, lg.Missing)
	}
	if l.late > 0 {
		b.note("steady %s %s %d/s: %d tasks were still being scheduled at their due time (the load generator fell behind)", system, config, rate, l.late)
	}
}
