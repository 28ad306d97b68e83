package main

import (
	"fmt"

	"github.com/delayq/delayq/bench/internal/report"
)

// verdict adds the notes that explain the figures: the targets as
// met or not met by this run, and what asynq cannot do.
func (b *bench) verdict() {
	r := b.r
	notMet := false
	defer func() {
		if notMet {
			b.note("Load average on this run: %s at the start, %s at the end, on %d CPUs shared by every process of both systems and the load generator. CPU contention inflates latency figures most; rerun on a quiet machine before quoting a target as not met.", r.Machine.LoadStart, r.Machine.LoadEnd, r.Machine.CPUs)
		}
	}()
	lagRow := func(system, config string, rate int) *report.Lag {
		for i := range r.Steady {
			if l := &r.Steady[i]; l.System == system && l.Config == config && l.Rate == rate {
				return l
			}
		}
		return nil
	}
	for _, rate := range b.p.Rates {
		dq, aq := lagRow(report.DelayQ, report.ConfigEvent1, rate), lagRow(report.Asynq, report.ConfigDefault, rate)
		if dq == nil || aq == nil || dq.Lag.P99ms <= 0 {
			continue
		}
		x := aq.Lag.P99ms / dq.Lag.P99ms
		status := "met"
		if x < 100 {
			status, notMet = "NOT met on this run", true
		}
		b.note("Target \"firing lag p99 at least 100x lower than asynq's default\" at %d tasks/s: %s (%.1f ms vs %.0f ms = %.0fx).", rate, status, dq.Lag.P99ms, aq.Lag.P99ms, x)
	}
	var dqMem, aqMem float64
	for _, m := range r.Memory {
		if m.System == report.DelayQ {
			dqMem = m.BytesPerTask
		} else {
			aqMem = m.BytesPerTask
		}
	}
	if dqMem > 0 && aqMem > 0 {
		status := "met"
		if dqMem >= aqMem {
			status, notMet = "NOT met on this run", true
		}
		b.note("Target \"less memory per pending task\": %s (%.0f vs %.0f bytes).", status, dqMem, aqMem)
	}
	var dqBatch, aqBest, dqSingle, aqSingle, dqEmbedded, dqWide, aqWide float64
	var dqEmbeddedRedis, aqSingleRedis float64 // redis-server µs per task
	for _, t := range r.Throughput {
		switch t.Label {
		case report.LabelDQHTTPBatch:
			dqBatch = t.TasksPerSec
		case report.LabelDQClientSingle:
			dqSingle = t.TasksPerSec
		case report.LabelDQEmbeddedSingle:
			dqEmbedded, dqEmbeddedRedis = t.TasksPerSec, t.RedisCPUus
		case report.LabelAQEnqueue16:
			aqSingle, aqSingleRedis = t.TasksPerSec, t.RedisCPUus
		case report.LabelDQEmbeddedWide:
			dqWide = t.TasksPerSec
		case report.LabelAQEnqueue64:
			aqWide = t.TasksPerSec
		}
		if t.System == report.Asynq {
			aqBest = max(aqBest, t.TasksPerSec)
		}
	}
	if dqBatch > 0 && aqBest > 0 {
		status := "met"
		if dqBatch <= aqBest {
			status, notMet = "NOT met on this run", true
		}
		b.note("Target \"faster batch scheduling\": %s (%.0f vs asynq's best %.0f tasks/s).", status, dqBatch, aqBest)
	}
	if dqSingle > 0 && aqSingle > dqSingle {
		b.note("One task per call asynq is faster (%.0f vs %.0f tasks/s): its client runs one Lua script on Redis directly, while a delayq producer goes through the daemon (HTTP + JSON, then the script). delayq's answer is the batch API.", aqSingle, dqSingle)
	}
	if dqEmbedded > 0 && aqSingle > 0 {
		b.note("One task per call from the producer's process straight to Redis (package embedded, as asynq's client does): delayq %.0f vs asynq %.0f tasks/s, %.2fx.", dqEmbedded, aqSingle, dqEmbedded/aqSingle)
		if dqEmbeddedRedis > 0 && aqSingleRedis > 0 {
			b.note("%s", redisBoundNote(dqEmbedded, dqEmbeddedRedis, aqSingle, aqSingleRedis))
		}
	}
	if dqWide > 0 && aqWide > 0 {
		b.note("The same from %d callers each: delayq %.0f vs asynq %.0f tasks/s, %.2fx.", asynqWideConc, dqWide, aqWide, dqWide/aqWide)
	}
	// the bars, over every round (-rounds): a single pass of each row says
	// little on a small, drifting machine
	for _, t := range r.SingleRatios() {
		if len(t.Measured) > 0 {
			b.note("Single-task bar (issue 46), %s.", t.Summary())
		}
	}
	b.note("asynq keeps due times as whole Unix seconds (the scheduled ZSET score is ProcessAt.Unix()) and its forwarder moves every task whose second has begun, so a task can run up to 1 s before its ProcessAt time; the \"early\" columns count them. The shorter the check interval, the more tasks run early. delayq compares due times in milliseconds against Redis TIME and never fires early.")
	b.note("asynq %s has no batch enqueue API: its batch figure is concurrent Enqueue calls (%d goroutines), its fastest way to schedule many tasks.", r.Machine.AsynqVersion, asynqWideConc)
	b.note("asynq has no reschedule: the churn workload emulates it with Inspector.DeleteTask then Enqueue with the same TaskID (two calls, not atomic: a producer that dies between them loses the task, and DeleteTask fails once the task is running).")
	b.note("asynq's lag includes its two polling intervals (forwarder: DelayedTaskCheckInterval; idle workers: TaskCheckInterval, jittered 0.5-1.5x); delayq's pollers sleep until the shard's earliest due time and are woken over Redis pub/sub when an earlier task arrives.")
	if len(r.Handling) > 0 {
		b.note("Handling: the process CPU per task is this whole process: for delayq it includes the in-process kfake broker serving the records (a real deployment pays that on the Kafka brokers), for asynq only its server; redis-server CPU per task is the like-for-like figure. The kafka-go raw rate is the same records read without Redis, the ceiling for any Kafka-fed worker on this broker.")
	}
	b.note("delayq's lag is taken where a Kafka consumer sees the record (franz-go PollFetches return), asynq's at handler start; delayq's figure at the record timestamp (dq-fired-at, before the produce) is in the last column of the steady table.")
}

// redisBoundNote says how busy each system's 16 single-call callers kept
// redis-server's one core (rate × redis-server CPU per task): where both
// are near 100%, the rate ratio is the inverse of their redis-server
// µs per task, whatever else the machine has to spare (docs/benchmarks.md,
// session 22).
func redisBoundNote(dqRate, dqUs, aqRate, aqUs float64) string {
	dqBusy, aqBusy := dqRate*dqUs/1e6, aqRate*aqUs/1e6
	s := fmt.Sprintf("redis-server's core in use during those rows: delayq %.0f%%, asynq %.0f%% (rate × redis-server CPU per task: %.1f and %.1f µs)", 100*dqBusy, 100*aqBusy, dqUs, aqUs)
	if dqBusy >= 0.85 && aqBusy >= 0.85 {
		return s + fmt.Sprintf("; both are bound by redis-server, so their ratio follows its CPU per task: 1.5x needs delayq at %.1f µs or less.", aqUs/1.5)
	}
	return s + "."
}
