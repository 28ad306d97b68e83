package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/worker"
)

// handling is workload 7 (issue #20): how fast one consumer runs a no-op
// handler, on the same redis-server.
//
//   - Tasks ready: delayq's N tasks are scheduled due now, fired into
//     Kafka by one event process (which is stopped once the topic holds N
//     records and no task is scheduled or firing), then one worker
//     (the public worker package, Concurrency handleConc) drains them;
//     asynq's N tasks are enqueued without delay, then one asynq.Server
//     (Concurrency handleConc) drains them. Before delayq's worker, a bare
//     kafka-go group Reader reads the same N records from the same broker:
//     what consuming alone costs.
//   - End to end: the consumer runs (a warm-up task handled first: the
//     worker's group is joined), then N tasks due now are scheduled
//     (delayq: Go client ScheduleBatch, batchWorkers goroutines, one event
//     process; asynq: Enqueue, singleWorkers goroutines) and handled.
func (b *bench) handling() {
	n, m := roundBatch(b.p.HandleTasks), roundBatch(b.p.E2ETasks)
	fmt.Printf("method, tasks ready: %d tasks runnable before the consumer starts (delayq: scheduled due now with ScheduleBatch, fired by one event process, which is then stopped; asynq: Enqueue without delay, %d goroutines); "+
		"one consumer with a no-op handler, concurrency %d (delayq: worker.New + Run in this process; asynq: one asynq.Server). tasks/s = first to N-th handler call; "+
		"CPU per task = redis-server INFO cpu and this process's getrusage (consumer, kfake broker, etcd) from the consumer's start until every outcome is stored, / N. "+
		"kafka-go raw: a bare group Reader (FetchMessage + CommitMessages, CommitInterval 100ms) on the same records, first to N-th record, once before and once after the worker (fresh groups); the raw rate is their mean.\n",
		n, asynqWideConc, handleConc)
	b.dqHandleReady(n)
	b.aqHandleReady(n)
	fmt.Printf("method, end to end: the consumer runs and has handled one warm-up task; then %d tasks due now are scheduled (delayq: Go client ScheduleBatch, %d tasks/call, %d goroutines, one event process, one worker; asynq: Enqueue, %d goroutines, one asynq.Server with its default intervals). "+
		"tasks/s = N / (N-th handler call - first schedule call); CPU from the first schedule call until every outcome is stored, / N (this process also runs the daemon, the event process and the load generator).\n",
		m, batchSize, batchWorkers, singleWorkers)
	b.dqEndToEnd(m)
	b.aqEndToEnd(m)
	if dq, aq := b.handlingRow(report.LabelHandleDQ), b.handlingRow(report.LabelHandleAQ); dq != nil && aq != nil && aq.TasksPerSec > 0 && aq.RedisCPUus > 0 {
		fmt.Printf("ready, delayq / asynq: %.2fx tasks/s, %.2fx redis-server CPU per task, %.2fx process CPU per task\n",
			dq.TasksPerSec/aq.TasksPerSec, dq.RedisCPUus/aq.RedisCPUus, dq.ProcCPUus/aq.ProcCPUus)
	}
	if dq, aq := b.handlingRow(report.LabelE2EDQ), b.handlingRow(report.LabelE2EAQ); dq != nil && aq != nil && aq.TasksPerSec > 0 && aq.RedisCPUus > 0 {
		fmt.Printf("end to end, delayq / asynq: %.2fx tasks/s, %.2fx redis-server CPU per task\n",
			dq.TasksPerSec/aq.TasksPerSec, dq.RedisCPUus/aq.RedisCPUus)
	}
}

// handleConc is the concurrency of the one consumer of workload 7 (both
// systems).
const handleConc = 64

// handleTimeout bounds how long one handling run may take to handle and
// store every task before it is reported as incomplete.
const handleTimeout = 3 * time.Minute

// warmupPrefix marks the end-to-end workload's warm-up task.
const warmupPrefix = "warmup-"

func roundBatch(n int) int { return max(batchSize, n/batchSize*batchSize) }

func (b *bench) handlingRow(label string) *report.Handling {
	for i := range b.r.Handling {
		if b.r.Handling[i].Label == label {
			return &b.r.Handling[i]
		}
	}
	return nil
}

// handled counts handler calls and stored outcomes of want tasks. Safe for
// concurrent use.
type handled struct {
	mu          sync.Mutex
	want        int
	calls       int
	ids         map[string]int
	first, last time.Time // first call, call that completed want distinct tasks
	stored      int
	storedAt    time.Time
	all         chan struct{} // closed at want distinct tasks handled
	allStored   chan struct{} // closed at want outcomes stored
	warm        chan struct{} // closed when the warm-up task is handled
	warmOnce    sync.Once
}

func newHandled(want int) *handled {
	return &handled{want: want, ids: make(map[string]int, want), all: make(chan struct{}), allStored: make(chan struct{}), warm: make(chan struct{})}
}

// call records one handler call of id.
func (h *handled) call(id string) {
	now := time.Now()
	if strings.HasPrefix(id, warmupPrefix) {
		h.warmOnce.Do(func() { close(h.warm) })
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls == 1 {
		h.first = now
	}
	h.ids[id]++
	if h.ids[id] == 1 && len(h.ids) == h.want {
		h.last = now
		close(h.all)
	}
}

// outcome records one stored outcome of id.
func (h *handled) outcome(id string) {
	if strings.HasPrefix(id, warmupPrefix) {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stored++; h.stored == h.want {
		h.storedAt = now
		close(h.allStored)
	}
}

// storedNow marks every outcome stored now (asynq: its queue was found
// empty).
func (h *handled) storedNow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.storedAt.IsZero() {
		h.storedAt = time.Now()
		h.stored = h.want
		close(h.allStored)
	}
}

// wait waits until want tasks were handled and their outcomes stored, or
// until handleTimeout; it reports whether they were.
func (h *handled) wait(ctx context.Context) bool {
	t := time.NewTimer(handleTimeout)
	defer t.Stop()
	for _, c := range []chan struct{}{h.all, h.allStored} {
		select {
		case <-c:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// snapshot is what h saw so far.
func (h *handled) snapshot() (distinct, dups, stored int, first, last, storedAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids), h.calls - len(h.ids), h.stored, h.first, h.last, h.storedAt
}

// cpuMark is the CPU used so far by redis-server and by this process, and
// redis-server's INFO commandstats (where its time went, by command).
type cpuMark struct {
	redis, proc time.Duration
	cmds        map[string]testenv.CommandStat
}

func (b *bench) cpuNow() cpuMark {
	r, err := b.in.RedisCPU(b.ctx())
	if err != nil {
		b.tb.Fatalf("INFO cpu: %v", err)
	}
	info, err := b.in.RDB.Info(b.ctx(), "commandstats").Result()
	if err != nil {
		b.tb.Fatalf("INFO commandstats: %v", err)
	}
	return cpuMark{redis: r, proc: testenv.ProcessCPU(), cmds: testenv.ParseCommandStats(info)}
}

// perTask is the CPU between m0 and m1 per task, in µs.
func perTask(m0, m1 cpuMark, n int) (redisUs, procUs float64) {
	return float64((m1.redis - m0.redis).Nanoseconds()) / 1000 / float64(n), float64((m1.proc - m0.proc).Nanoseconds()) / 1000 / float64(n)
}

// dqBatches are n tasks due now in batches of batchSize.
func dqBatches(n int, prefix string) [][]client.Task {
	out := make([][]client.Task, n/batchSize)
	for i := range out {
		out[i] = make([]client.Task, batchSize)
		for j := range out[i] {
			t := dqTask(0)
			t.ID = prefix + t.ID
			out[i][j] = t
		}
	}
	return out
}

// dqWorker starts delayq's worker with a no-op handler reporting to h.
func (b *bench) dqWorker(scope *tbenv.TB, d *systems.DelayQ, h *handled) {
	systems.StartWorker(scope, b.in, d, systems.WorkerOptions{
		Concurrency: handleConc,
		Handler: func(ctx context.Context, t *worker.Task) error {
			h.call(t.ID)
			return nil
		},
		OnOutcome: func(o worker.Outcome) {
			if o.Kind == worker.OutcomeSucceeded {
				h.outcome(o.Task.ID)
			}
		},
	})
}

// aqHandler is asynq's no-op handler reporting to h.
func aqHandler(h *handled) func(context.Context, *asynq.Task) error {
	return func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		h.call(id)
		return nil
	}
}

// dqHandleReady is the delayq half of "tasks ready", with kafka-go's raw
// rate on the same records.
func (b *bench) dqHandleReady(n int) {
	scope := b.scope("handling-ready-delayq")
	defer scope.Close()
	fire := scope.Sub("fire")
	d := systems.StartDelayQ(fire, b.in, systems.DelayQOptions{Events: 1})
	batches := dqBatches(n, "")
	t0 := time.Now()
	c := run(batchWorkers, len(batches), func(i int) error { return scheduleBatch(b, d.Client, batches[i]) })
	if c.errs > 0 {
		b.note("handling ready delayq: %d of %d batch calls failed, first: %v", c.errs, len(batches), c.firstErr)
	}
	want := int64(n - c.errs*batchSize)
	cl := b.in.Kafka.Client(scope)
	var end int64
	st := &client.Stats{}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var err error
		end, err = d.TopicEnd(b.ctx(), cl)
		if err == nil {
			var s *client.Stats
			if s, err = d.Client.Stats(b.ctx()); err == nil {
				st = s
			}
		}
		if err == nil && end >= want && st.Totals.Scheduled == 0 && st.Totals.Firing == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.tb.Fatalf("handling ready delayq: after 2m the topic holds %d of %d records, %d scheduled, %d firing (last error: %v)", end, want, st.Totals.Scheduled, st.Totals.Firing, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("delayq: %d tasks scheduled and fired (topic holds %d records, none scheduled or firing) in %.1fs; event process and daemon stopped\n", want, end, time.Since(t0).Seconds())
	fire.Close()

	// raw kafka-go reads the same records before and after the worker
	// (a fresh group each time): one raw pass varies by a quarter from
	// the next on a small machine, so the worker is compared with both and
	// with their mean, which is the row's rate
	rawRate, rawFirst, rawCPU := b.rawConsume(scope, d.Topic, "raw-before-"+d.Topic, int(want))
	fmt.Printf("%-8s %-72s %8.0f records/s  first after %.2fs  process CPU %.2fus/record\n", "kafka-go", "raw group Reader, same records, before the worker", rawRate, rawFirst, rawCPU)

	h := newHandled(int(want))
	m0, start := b.cpuNow(), time.Now()
	b.dqWorker(scope, d, h)
	ok := h.wait(b.ctx())
	m1 := b.cpuNow()
	b.addHandling(report.DelayQ, report.PhaseReady, report.LabelHandleDQ,
		fmt.Sprintf("one worker (worker package), Concurrency %d, no-op handler", handleConc), int(want), start, h, m0, m1, ok, nil)

	after, afterFirst, afterCPU := b.rawConsume(scope, d.Topic, "raw-after-"+d.Topic, int(want))
	fmt.Printf("%-8s %-72s %8.0f records/s  first after %.2fs  process CPU %.2fus/record\n", "kafka-go", "raw group Reader, same records, after the worker", after, afterFirst, afterCPU)
	rawRow := report.Handling{
		System: "kafka-go", Phase: report.PhaseReady, Label: report.LabelHandleRaw,
		Method: "bare kafka-go group Reader, FetchMessage + CommitMessages (CommitInterval 100ms), same records; mean of a pass before and a pass after the worker",
		Tasks:  int(want), TasksPerSec: (rawRate + after) / 2, FirstS: (rawFirst + afterFirst) / 2, ProcCPUus: (rawCPU + afterCPU) / 2, Handled: int(want),
	}
	b.r.Handling = append(b.r.Handling, rawRow)
	if dq := b.handlingRow(report.LabelHandleDQ); dq != nil && rawRate > 0 && after > 0 {
		fmt.Printf("delayq worker at %.0f%% of the raw kafka-go rate (mean of the passes before and after it; %.0f%%, %.0f%% of each)\n",
			100*dq.TasksPerSec/rawRow.TasksPerSec, 100*dq.TasksPerSec/rawRate, 100*dq.TasksPerSec/after)
	}
}

// rawConsume reads n records of topic with a fresh kafka-go group Reader
// of the group named (as worker/bench_test.go's rawConsume) and returns records per second
// from the first record to the n-th, the seconds until the first and this
// process's CPU per record (µs).
func (b *bench) rawConsume(scope *tbenv.TB, topic, group string, n int) (rate, firstS, cpuUs float64) {
	p0, start := testenv.ProcessCPU(), time.Now()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: b.in.Kafka.Brokers, GroupID: group, GroupTopics: []string{topic},
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond,
		CommitInterval: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
		HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second,
	})
	defer testenv.CloseKafkaGoReader(scope, r)
	ctx, cancel := context.WithTimeout(b.ctx(), 2*time.Minute)
	defer cancel()
	var first time.Time
	for i := range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			b.tb.Fatalf("handling: raw kafka-go fetch %d of %d: %v", i, n, err)
		}
		if i == 0 {
			first = time.Now()
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			b.tb.Fatalf("handling: raw kafka-go commit: %v", err)
		}
	}
	last := time.Now()
	cpu := testenv.ProcessCPU() - p0
	return float64(n-1) / last.Sub(first).Seconds(), first.Sub(start).Seconds(), float64(cpu.Nanoseconds()) / 1000 / float64(n)
}

// aqHandleReady is the asynq half of "tasks ready".
func (b *bench) aqHandleReady(n int) {
	scope := b.scope("handling-ready-asynq")
	defer scope.Close()
	a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{PoolSize: asynqPool})
	ids := ids(n)
	t0 := time.Now()
	c := run(asynqWideConc, n, func(i int) error {
		_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(ids[i]))
		return err
	})
	if c.errs > 0 {
		b.note("handling ready asynq: %d of %d Enqueue calls failed, first: %v", c.errs, n, c.firstErr)
	}
	want := n - c.errs
	qi, err := a.Inspector.GetQueueInfo(a.Queue)
	if err != nil {
		b.tb.Fatalf("asynq queue info: %v", err)
	}
	fmt.Printf("asynq: %d tasks enqueued in %.1fs (%d pending)\n", want, time.Since(t0).Seconds(), qi.Pending)
	if qi.Pending != want {
		b.note("handling ready asynq: %d tasks pending after enqueueing %d", qi.Pending, want)
	}

	h := newHandled(want)
	m0, start := b.cpuNow(), time.Now()
	systems.StartAsynqServer(scope, b.in, systems.AsynqOptions{Concurrency: asynqServeConc, Handle: aqHandler(h)})
	go b.aqWaitEmpty(a, h)
	ok := h.wait(b.ctx())
	m1 := b.cpuNow()
	b.addHandling(report.Asynq, report.PhaseReady, report.LabelHandleAQ,
		fmt.Sprintf("one asynq.Server, Concurrency %d, no-op handler", asynqServeConc), want, start, h, m0, m1, ok, nil)
}

// aqWaitEmpty marks h's outcomes stored once every task was handled and
// asynq's queue is empty (a completed task without retention is deleted
// when its handler returns: the queue's last outcome is stored).
func (b *bench) aqWaitEmpty(a *systems.Asynq, h *handled) {
	select {
	case <-h.all:
	case <-b.ctx().Done():
		return
	case <-time.After(3 * time.Minute):
		return
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if qi, err := a.Inspector.GetQueueInfo(a.Queue); err == nil && qi.Size == 0 {
			h.storedNow()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dqEndToEnd schedules m tasks due now into a running delayq (one event
// process, one worker) and waits until all are handled.
func (b *bench) dqEndToEnd(m int) {
	scope := b.scope("handling-e2e-delayq")
	defer scope.Close()
	d := systems.StartDelayQ(scope, b.in, systems.DelayQOptions{Events: 1})
	h := newHandled(m)
	b.dqWorker(scope, d, h)
	if _, err := d.Client.Schedule(b.ctx(), client.Task{ID: warmupPrefix + uuid.NewString(), Type: taskType, Payload: payloadJSON}); err != nil {
		b.tb.Fatalf("handling e2e delayq: warm-up task: %v", err)
	}
	b.waitWarm(h, "delayq")
	batches := dqBatches(m, "")
	m0, t0 := b.cpuNow(), time.Now()
	c := run(batchWorkers, len(batches), func(i int) error { return scheduleBatch(b, d.Client, batches[i]) })
	if c.errs > 0 {
		b.note("handling e2e delayq: %d of %d batch calls failed, first: %v", c.errs, len(batches), c.firstErr)
		h.mu.Lock()
		h.want = m - c.errs*batchSize
		h.mu.Unlock()
	}
	ok := h.wait(b.ctx())
	m1 := b.cpuNow()
	b.addHandling(report.DelayQ, report.PhaseE2E, report.LabelE2EDQ,
		fmt.Sprintf("Go client ScheduleBatch (%d tasks/call, %d goroutines) → one event process → one worker, Concurrency %d", batchSize, batchWorkers, handleConc),
		m-c.errs*batchSize, t0, h, m0, m1, ok, &c)
}

// aqEndToEnd enqueues m tasks without delay into a running asynq server
// and waits until all are handled.
func (b *bench) aqEndToEnd(m int) {
	scope := b.scope("handling-e2e-asynq")
	defer scope.Close()
	h := newHandled(m)
	a := systems.StartAsynq(scope, b.in, systems.AsynqOptions{Serve: true, Concurrency: asynqServeConc, PoolSize: asynqPool, Handle: aqHandler(h)})
	if _, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(warmupPrefix+uuid.NewString())); err != nil {
		b.tb.Fatalf("handling e2e asynq: warm-up task: %v", err)
	}
	b.waitWarm(h, "asynq")
	ids := ids(m)
	go b.aqWaitEmpty(a, h)
	m0, t0 := b.cpuNow(), time.Now()
	c := run(singleWorkers, m, func(i int) error {
		_, err := a.Client.EnqueueContext(b.ctx(), aqTask(), asynq.TaskID(ids[i]))
		return err
	})
	if c.errs > 0 {
		b.note("handling e2e asynq: %d of %d Enqueue calls failed, first: %v", c.errs, m, c.firstErr)
		h.mu.Lock()
		h.want = m - c.errs
		h.mu.Unlock()
	}
	ok := h.wait(b.ctx())
	m1 := b.cpuNow()
	b.addHandling(report.Asynq, report.PhaseE2E, report.LabelE2EAQ,
		fmt.Sprintf("Enqueue (%d goroutines) → one asynq.Server, Concurrency %d, default intervals", singleWorkers, asynqServeConc),
		m-c.errs, t0, h, m0, m1, ok, &c)
}

func (b *bench) waitWarm(h *handled, system string) {
	select {
	case <-h.warm:
	case <-time.After(time.Minute):
		b.tb.Fatalf("handling e2e %s: warm-up task not handled within 1m", system)
	}
}

// addHandling records one handling row. start is the consumer's start
// (ready) or the first schedule call (end to end, c set).
func (b *bench) addHandling(system, phase, label, method string, n int, start time.Time, h *handled, m0, m1 cpuMark, ok bool, c *calls) {
	distinct, dups, stored, first, last, storedAt := h.snapshot()
	row := report.Handling{
		System: system, Phase: phase, Label: label, Method: method, Tasks: n, Concurrency: handleConc,
		Handled: distinct, Duplicates: dups,
	}
	if !first.IsZero() {
		row.FirstS = first.Sub(start).Seconds()
	}
	if ok {
		if c == nil {
			row.TasksPerSec = float64(n-1) / last.Sub(first).Seconds()
		} else {
			row.TasksPerSec = float64(n) / last.Sub(start).Seconds()
		}
		row.StoredMs = float64(storedAt.Sub(last).Microseconds()) / 1000
	}
	row.RedisCPUus, row.ProcCPUus = perTask(m0, m1, n)
	if c != nil {
		row.Errors = c.errs
		row.ScheduleS = c.elapsed.Seconds()
		row.ScheduleRate = float64(n) / c.elapsed.Seconds()
	}
	b.r.Handling = append(b.r.Handling, row)
	sched := ""
	if c != nil {
		sched = fmt.Sprintf("  scheduled in %.2fs (%.0f tasks/s)", row.ScheduleS, row.ScheduleRate)
	}
	fmt.Printf("%-8s %-10s %-62s %8.0f tasks/s  first handled after %.2fs, all stored %.1fms after the N-th call%s; CPU per task: redis-server %.2fus, this process %.2fus; handled %d of %d, dups %d\n",
		system, phase, method, row.TasksPerSec, row.FirstS, row.StoredMs, sched, row.RedisCPUus, row.ProcCPUus, distinct, n, dups)
	// evalsha's time includes the commands its scripts call, which count
	// under their own names too
	fmt.Printf("         redis-server per task, by command: %s\n", testenv.CommandStatsDelta(m0.cmds, m1.cmds, n))
	if !ok {
		b.note("handling %s %s: %d of %d tasks handled, %d outcomes stored within 3 minutes", system, phase, distinct, n, stored)
	}
	if dups > 0 {
		b.note("handling %s %s: %d duplicate handler calls", system, phase, dups)
	}
}
