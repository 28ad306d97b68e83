package main

import (
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/stats"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/client"
)

const (
	churnWindow = 2 * time.Second // due times spread over this window
	churnShift  = 2 * time.Second // a rescheduled task moves this much later
	churnOps    = 16              // concurrent cancel/reschedule callers
)

// churner is one system's schedule, cancel and reschedule.
type churner struct {
	system, how string
	schedule    func(ids []string, dues []time.Time) calls
	cancel      func(id string) error
	reschedule  func(id string, due time.Time) error
	opsRate     float64 // expected cancel/reschedule calls per second
	schedRate   float64
}

// churn is workload 5: ChurnTasks tasks due over 2 s; before they are due
// 30% are cancelled and 20% rescheduled 2 s later. Checked: no cancelled
// task fires; a rescheduled one fires once, at its new time.
func (b *bench) churn() {
	{
		scope := b.scope("churn-delayq")
		rec := systems.NewRecorder(b.p.ChurnTasks)
		d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{Events: 1, Record: rec})
		b.runChurn(rec, churner{
			system: report.DelayQ, how: "PATCH /v1/tasks/{id} (Go client Reschedule)",
			schedule: func(ids []string, dues []time.Time) calls {
				return run(batchWorkers, (len(ids)+batchSize-1)/batchSize, func(i int) error {
					lo, hi := i*batchSize, min((i+1)*batchSize, len(ids))
					tasks := make([]client.Task, 0, hi-lo)
					for k := lo; k < hi; k++ {
						tasks = append(tasks, client.Task{ID: ids[k], Type: taskType, Payload: payloadJSON, DueAt: dues[k]})
					}
					return scheduleBatch(b, d.Client, tasks)
				})
			},
			cancel: func(id string) error { return d.Client.Cancel(b.ctx(), id) },
			reschedule: func(id string, due time.Time) error {
				_, err := d.Client.Reschedule(b.ctx(), id, due)
				return err
			},
			opsRate:   b.rate(report.LabelDQClientSingle, 2000),
			schedRate: b.rate(report.LabelDQClientBatch, 20000),
		})
		scope.Close()
	}
	{
		scope := b.scope("churn-asynq")
		rec := systems.NewRecorder(b.p.ChurnTasks)
		a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{Serve: true, Record: rec, Concurrency: asynqServeConc, PoolSize: asynqPool})
		b.runChurn(rec, churner{
			system: report.Asynq, how: "emulated: Inspector.DeleteTask + Enqueue with the same TaskID (asynq has no reschedule; two calls, not atomic)",
			schedule: func(ids []string, dues []time.Time) calls {
				return run(asynqWideConc, len(ids), func(i int) error {
					_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(ids[i]), asynq.ProcessAt(dues[i]))
					return err
				})
			},
			cancel: func(id string) error { return a.Inspector.DeleteTask(a.Queue, id) },
			reschedule: func(id string, due time.Time) error {
				if err := a.Inspector.DeleteTask(a.Queue, id); err != nil {
					return err
				}
				_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(id), asynq.ProcessAt(due))
				return err
			},
			opsRate:   b.rate(report.LabelAQEnqueue16, 2000) / 1.5,
			schedRate: b.rate(report.LabelAQEnqueue64, 10000),
		})
		scope.Close()
	}
}

func (b *bench) runChurn(rec *systems.Recorder, c churner) {
	n := b.p.ChurnTasks
	ids := ids(n)
	nOps := n / 2
	est := float64(n)/c.schedRate + float64(nOps)/c.opsRate
	first := time.Now().Add(time.Duration(1.5*est*float64(time.Second)) + 500*time.Millisecond).Truncate(time.Millisecond)
	dues := make([]time.Time, n)
	newDue := make([]time.Time, n)
	var lastDue time.Time
	for i := range ids {
		dues[i] = first.Add(churnWindow * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
		switch kind(i) {
		case kindKeep:
			rec.Expect(ids[i], dues[i])
		case kindResched:
			newDue[i] = dues[i].Add(churnShift)
			rec.Expect(ids[i], newDue[i])
			lastDue = newDue[i]
		}
	}
	if sc := c.schedule(ids, dues); sc.errs > 0 {
		b.note("churn %s: %d schedule calls failed, first: %v", c.system, sc.errs, sc.firstErr)
	}
	var opIdx []int
	for i := range ids {
		if kind(i) != kindKeep {
			opIdx = append(opIdx, i)
		}
	}
	ops := run(churnOps, len(opIdx), func(k int) error {
		i := opIdx[k]
		if kind(i) == kindCancel {
			return c.cancel(ids[i])
		}
		return c.reschedule(ids[i], newDue[i])
	})
	opsDone := time.Now()
	if ops.errs > 0 {
		b.note("churn %s: %d cancel/reschedule calls failed, first: %v", c.system, ops.errs, ops.firstErr)
	}
	res := rec.Result()
	rec.WaitDistinct(res.Expected, lastDue.Add(20*time.Second))
	time.Sleep(time.Second) // a cancelled task firing late would show up now
	res = rec.Result()

	out := report.Churn{
		System: c.system, Tasks: n, RescheduleHow: c.how,
		OpsPerSec: float64(len(opIdx)) / ops.elapsed.Seconds(), OpErrors: ops.errs,
		OpsBeforeDue: opsDone.Before(first), Duplicates: res.Duplicates,
		LagP99ms: stats.Summarize(res.Visible).P99ms,
	}
	for i, id := range ids {
		s, copies := rec.Lookup(id)
		switch kind(i) {
		case kindCancel:
			out.Cancelled++
			if copies > 0 {
				out.CancelledFired++
			}
		case kindResched:
			out.Rescheduled++
			switch {
			case copies == 0:
				out.ReschedMissing++
			case s.At.Before(newDue[i].Add(-time.Second)):
				out.ReschedOldTime++
			case s.At.Before(newDue[i]):
				out.ReschedEarly++
			case copies > 1:
				out.ReschedTwice++
			default:
				out.ReschedOnce++
			}
		default:
			switch {
			case copies == 0:
				out.KeptMissing++
			case s.At.Before(dues[i]):
				out.KeptEarly++
			}
		}
	}
	b.r.Churn = append(b.r.Churn, out)
	fmt.Printf("%-6s %d tasks, %d ops at %.0f/s (done before first due: %v): cancelled %d fired %d; rescheduled %d: once on time %d, early %d, at old time %d, twice %d, missing %d; kept missing %d early %d; dups %d\n",
		c.system, n, len(opIdx), out.OpsPerSec, out.OpsBeforeDue, out.Cancelled, out.CancelledFired, out.Rescheduled, out.ReschedOnce,
		out.ReschedEarly, out.ReschedOldTime, out.ReschedTwice, out.ReschedMissing, out.KeptMissing, out.KeptEarly, out.Duplicates)
	if !out.OpsBeforeDue {
		b.note("churn %s: cancel/reschedule calls finished %.1fs after the first task was due; some operations may have met fired tasks", c.system, opsDone.Sub(first).Seconds())
	}
}

const (
	kindKeep = iota
	kindCancel
	kindResched
)

// kind: 30% cancelled, 20% rescheduled, 50% kept, interleaved.
func kind(i int) int {
	switch i % 10 {
	case 0, 1, 2:
		return kindCancel
	case 3, 4:
		return kindResched
	}
	return kindKeep
}
