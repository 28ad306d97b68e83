package main

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// payload is every task's payload: 100 bytes of JSON.
var payload = []byte(`"` + strings.Repeat("x", 98) + `"`)

// schedule submits n tasks named prefix+i through the batch API (POST
// /v1/tasks/batch with the Go client's ScheduleBatch): batches of
// cfg.batch, cfg.clients goroutines, spread over the daemons. due(i) is
// task i's due time. It returns how long it took and the tasks refused.
func (b *run) schedule(prefix string, n int, topic string, due func(i int) time.Time) (time.Duration, int) {
	ctx := b.e.scope.Context()
	next := atomic.Int64{}
	var failed atomic.Int64
	var firstErr atomic.Value
	batches := (n + b.cfg.batch - 1) / b.cfg.batch
	t0 := time.Now()
	var wg sync.WaitGroup
	for c := range b.cfg.clients {
		api := b.e.api[c%len(b.e.api)]
		wg.Go(func() {
			tasks := make([]client.Task, 0, b.cfg.batch)
			for {
				j := int(next.Add(1)) - 1
				if j >= batches {
					return
				}
				tasks = tasks[:0]
				for i := j * b.cfg.batch; i < min((j+1)*b.cfg.batch, n); i++ {
					tasks = append(tasks, client.Task{
						ID: prefix + strconv.Itoa(i), Type: "scale", Payload: payload, Topic: topic, DueAt: due(i),
					})
				}
				res, err := api.ScheduleBatch(ctx, tasks)
				if err != nil {
					failed.Add(int64(len(tasks)))
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				for _, r := range res {
					if r.Err != nil || r.State != "scheduled" {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("task %s: state %q, %v", r.ID, r.State, r.Err))
					}
				}
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		say("k=%d: %d of %d tasks refused; first: %v", b.e.k, failed.Load(), n, err)
	}
	return time.Since(t0), int(failed.Load())
}

// lead is how far ahead of now tasks due at one instant are put so that
// scheduling n of them ends before it: 1.5× the time the schedule phase's
// rate gives, plus 1s, at least 2s.
func (b *run) lead(n int) time.Duration {
	d := time.Second
	if b.res.Schedule.Rate > 0 {
		d += time.Duration(1.5 * float64(n) / b.res.Schedule.Rate * float64(time.Second))
	} else {
		d += time.Duration(n) * time.Millisecond
	}
	return max(d, 2*time.Second)
}

// cpuPerTask prints and returns each master's redis-server CPU per task
// between two INFO cpu readings, and their sum.
func (b *run) cpuPerTask(what string, c0, c1 []time.Duration, n int) CPU {
	out := CPU{Method: "INFO cpu (used_cpu_user+used_cpu_sys) of every master before and after, delta / tasks"}
	if n == 0 {
		return out
	}
	var parts []string
	for i := range c0 {
		us := float64((c1[i] - c0[i]).Microseconds()) / float64(n)
		out.PerMasterUs = append(out.PerMasterUs, us)
		out.SumUs += us
		parts = append(parts, fmt.Sprintf("m%d %.1f", i, us))
	}
	say("k=%d %-8s redis CPU per task (INFO cpu delta / %d tasks, per master, µs): %s; all masters %.1f µs",
		b.e.k, what, n, strings.Join(parts, ", "), out.SumUs)
	return out
}

// commandsPerTask prints where the masters' command time went per task
// between two INFO commandstats readings: calls and µs per task by
// command. A script's commands count both in evalsha (whose time includes
// them) and under their own names; the time outside commands (reading,
// parsing and answering calls, the event loop) is in INFO cpu only, so a
// phase with more calls per task costs more than its commands' sum.
func (b *run) commandsPerTask(what string, before, after redisStats, n int) {
	if n == 0 {
		return
	}
	say("k=%d %-8s redis per task by command (INFO commandstats of every master; evalsha includes its scripts' commands): %s",
		b.e.k, what, testenv.CommandStatsDelta(before.cmds, after.cmds, n))
	say("k=%d %-8s redis client reads %.3f and writes %.3f per task (INFO stats of every master: a read takes a call or a pipeline, a write sends answers back; each is an event-loop turn's share)",
		b.e.k, what, float64(after.reads-before.reads)/float64(n), float64(after.writes-before.writes)/float64(n))
}

// scriptsFrom starts a phase's -redis-scripts window (a no-op without
// the flag); the func it returns ends it and prints the scripts per task
// of n tasks.
func (b *run) scriptsFrom() func(what string, n int) {
	if !b.cfg.redisScripts {
		return func(string, int) {}
	}
	was := b.e.slowlogOn()
	return func(what string, n int) { b.scriptsPerTask(what, b.e.slowlogOff(was), n) }
}

// phaseSchedule: N tasks due in 1h through the batch API.
func (b *run) phaseSchedule() {
	n := b.cfg.schedule
	due := time.Now().Add(time.Hour)
	stop := b.startCPUProfile("schedule")
	scripts := b.scriptsFrom()
	s0 := b.e.cpuSnap()
	took, failed := b.schedule(fmt.Sprintf("k%d-s-", b.e.k), n, tasksTopic, func(int) time.Time { return due })
	s1 := b.e.cpuSnap()
	stop()
	defer scripts("schedule", n)
	c0, c1 := s0.masters, s1.masters
	r := &b.res.Schedule
	r.Method = fmt.Sprintf("POST /v1/tasks/batch (Go client ScheduleBatch), %d client goroutines over %d daemon(s), batches of %d, tasks due in 1h, %d-byte payload; rate = tasks / wall time",
		b.cfg.clients, len(b.e.api), b.cfg.batch, len(payload))
	r.Tasks, r.Failed, r.Seconds = n, failed, took.Seconds()
	r.Rate = float64(n-failed) / took.Seconds()
	say("k=%d schedule  %d tasks in %v: %.0f tasks/s [%s]", b.e.k, n, took.Round(time.Millisecond), r.Rate, r.Method)
	r.RedisCPU = b.cpuPerTask("schedule", c0, c1, n)
	r.Cores = b.cores("schedule", s0, s1)
}

// phaseBurst: M tasks due at one instant T on a topic only the bench's
// consumer reads; drain = T -> the M-th distinct record seen.
func (b *run) phaseBurst() {
	b.dueAtOnce(&b.res.Burst, atOnce{
		phase: "burst", tag: "b", n: b.cfg.burst, tap: b.e.consumer, topic: burstTopic,
		what: "in Kafka (consumer)", unit: "tasks/s", one: "record", dupName: "dup copies",
		method: func(lead time.Duration) string {
			return fmt.Sprintf("%d tasks due at one instant T (scheduled first, %v ahead), topic %s read by a franz-go consumer in the bench (no group, FetchMaxWait 10ms); drain = T -> the last distinct task's record seen; rate = tasks / drain",
				b.cfg.burst, lead.Round(time.Millisecond), burstTopic)
		},
	})
}

// phaseHandled: H tasks due at one instant T on the work processes' topic;
// handled = T -> the H-th distinct webhook call.
func (b *run) phaseHandled() {
	b.dueAtOnce(&b.res.Handled, atOnce{
		phase: "handled", tag: "h", n: b.cfg.handled, tap: b.e.hook, topic: tasksTopic,
		// the finishes of the last calls are in the Redis CPU
		settle: 500 * time.Millisecond,
		what:   "webhook", unit: "calls/s", one: "call", dupName: "repeated calls",
		method: func(lead time.Duration) string {
			return fmt.Sprintf("%d tasks due at one instant T (scheduled first, %v ahead) on %s, run by %d work process(es) calling the bench's webhook (answers 200 at once); rate = tasks / (T -> the last distinct task's webhook call); Redis CPU covers schedule, take, claim and finish (read 500ms after the last call)",
				b.cfg.handled, lead.Round(time.Millisecond), tasksTopic, len(b.e.workers))
		},
	})
}

// atOnce describes a phase of n tasks due at one instant, seen at tap.
type atOnce struct {
	phase, tag string // the phase's name, and its task ids' letter
	n          int
	tap        *tap
	topic      string
	// settle: how long after the last sighting the Redis CPU is read
	settle time.Duration
	// what names where the tasks are seen, unit the rate, one a sighting
	// and dupName the sightings of a task seen before
	what, unit, one, dupName string
	method                   func(lead time.Duration) string
}

// dueAtOnce schedules p.n tasks due at one instant T, waits until p.tap
// has seen every one (or the phase timeout passed), then fills r with the
// rate from T to the last one seen, prints it and the Redis CPU per task.
func (b *run) dueAtOnce(r *Rate, p atOnce) {
	lead := b.lead(p.n)
	at := time.Now().Add(lead).Truncate(time.Millisecond)
	w := newWatch(fmt.Sprintf("k%d-%s-", b.e.k, p.tag), p.n)
	p.tap.cur.Store(w)
	defer p.tap.cur.Store(nil)
	scripts := b.scriptsFrom()
	c0, cs0 := b.e.redisCPU(), b.e.commandStats()
	pre := b.e.cpuSnap() // the CPU per task covers the scheduling too
	we0 := b.e.workEach()
	// the cores busy from T on (the scheduling before T is not the phase's)
	type started struct {
		snap cpuSnap
		stop func() // the phase's CPU profile
	}
	atSnap := make(chan started, 1)
	go func() {
		time.Sleep(time.Until(at))
		st := started{stop: b.startCPUProfile(p.phase)}
		st.snap = b.e.cpuSnap()
		atSnap <- st
	}()
	took, failed := b.schedule(w.prefix, p.n, p.topic, func(int) time.Time { return at })
	r.Method = p.method(lead)
	r.Tasks, r.Failed = p.n, failed
	if slack := time.Until(at); slack < 0 {
		b.note("k=%d %s: scheduling took %v and ended %v after the due time: the rate includes ingress", b.e.k, p.phase, took.Round(time.Millisecond), -slack.Round(time.Millisecond))
	}
	all := w.wait(time.Until(at) + b.cfg.timeout)
	n, first, last, _, dups := w.snapshot()
	endSnap := b.e.cpuSnap()
	st := <-atSnap
	st.stop()
	s0 := st.snap
	time.Sleep(p.settle)
	c1, cs1 := b.e.redisCPU(), b.e.commandStats()
	post := b.e.cpuSnap()
	we1 := b.e.workEach()
	defer scripts(p.phase, p.n)
	r.Seen, r.Dups = n, dups
	if n == 0 {
		b.note("k=%d %s: no %s within %v of the due time", b.e.k, p.phase, p.one, b.cfg.timeout)
		return
	}
	span := last.Sub(at)
	r.DrainSeconds, r.FirstMs = span.Seconds(), ms(first.Sub(at))
	r.Rate = float64(n) / span.Seconds()
	if !all {
		b.note("k=%d %s: only %d of %d seen within %v of the due time", b.e.k, p.phase, n, p.n, b.cfg.timeout)
	}
	say("k=%d %-9s %d tasks due at once -> %s in %v: %.0f %s; first %s %.0f ms after T; %s %d [%s]",
		b.e.k, p.phase, n, p.what, span.Round(time.Millisecond), r.Rate, p.unit, p.one, r.FirstMs, p.dupName, dups, r.Method)
	r.RedisCPU = b.cpuPerTask(p.phase, c0, c1, n)
	b.commandsPerTask(p.phase, cs0, cs1, n)
	r.Cores = b.cores(p.phase, s0, endSnap)
	r.PerTask = perTask(pre, post, n)
	say("k=%d %-9s CPU per task, scheduling to the last %s: %s", b.e.k, p.phase, p.one, r.PerTask)
	b.workEachPerTask(p.phase, we0, we1)
}

// workEachPerTask prints each work process' CPU per task it handled
// between a and z (with two or more): the paired figure of processes
// given different settings in one run (-env work1:...).
func (b *run) workEachPerTask(what string, a, z workEach) {
	if len(a.cpu) < 2 {
		return
	}
	var parts []string
	for i := range a.cpu {
		n := z.handled[i] - a.handled[i]
		if a.handled[i] < 0 || z.handled[i] < 0 || n <= 0 {
			continue // none, or a /metrics that did not answer
		}
		part := fmt.Sprintf("work %d %.1f µs (%.0f tasks)", i, float64((z.cpu[i]-a.cpu[i]).Microseconds())/n, n)
		if env := b.cfg.roleEnv["work"+strconv.Itoa(i)]; len(env) > 0 {
			part += fmt.Sprintf(" %v", env)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return // no task handled in this phase (the burst's topic has no workers)
	}
	say("k=%d %-9s each work process' CPU per task it handled (/proc/<pid>/stat over delayq_work_handled_total): %s", b.e.k, what, strings.Join(parts, ", "))
}

// cores prints and returns the cores each kind of process kept busy
// between a and b.
func (b *run) cores(what string, a, z cpuSnap) Cores {
	c := coresBusy(a, z)
	say("k=%d %-8s cores busy over %.2fs (of %d): %s", b.e.k, what, c.Seconds, runtime.NumCPU(), c)
	return c
}

// phaseLag: a steady stream, rate tasks/s due over dur, scheduled ahead;
// lag = receive time - due time at the consumer and at the webhook.
func (b *run) phaseLag() {
	n := int(b.cfg.lagRate * b.cfg.lagDur.Seconds())
	if n < 1 {
		return
	}
	lead := b.lead(n)
	start := time.Now().Add(lead).Truncate(time.Millisecond)
	step := time.Duration(float64(b.cfg.lagDur) / float64(n))
	prefix := fmt.Sprintf("k%d-l-", b.e.k)
	wc, wh := newWatch(prefix, n), newWatch(prefix, n)
	b.e.consumer.cur.Store(wc)
	b.e.hook.cur.Store(wh)
	defer b.e.consumer.cur.Store(nil)
	defer b.e.hook.cur.Store(nil)
	c0, cs0 := b.e.redisCPU(), b.e.commandStats()
	pre := b.e.cpuSnap()
	took, failed := b.schedule(prefix, n, tasksTopic, func(i int) time.Time { return start.Add(time.Duration(i) * step) })
	r := &b.res.Lag
	r.Method = fmt.Sprintf("%d tasks due evenly over %v (%.0f/s), scheduled first (%v ahead) on %s; lag = receive time - dq-due-at, at the bench's franz-go consumer (fire lag) and at the webhook (end to end), first copy of each task",
		n, b.cfg.lagDur, b.cfg.lagRate, lead.Round(time.Millisecond), tasksTopic)
	r.Tasks, r.Failed = n, failed
	if slack := time.Until(start); slack < 0 {
		b.note("k=%d lag: scheduling took %v and ended %v after the first due time: the first tasks' lag includes ingress", b.e.k, took.Round(time.Millisecond), -slack.Round(time.Millisecond))
	}
	end := start.Add(b.cfg.lagDur)
	okc := wc.wait(time.Until(end) + b.cfg.timeout)
	okh := wh.wait(time.Until(end) + b.cfg.timeout)
	c1, cs1 := b.e.redisCPU(), b.e.commandStats()
	post := b.e.cpuSnap()
	nc, _, _, lc, dc := wc.snapshot()
	nh, _, _, lh, dh := wh.snapshot()
	if !okc || !okh {
		b.note("k=%d lag: seen %d of %d at the consumer, %d of %d at the webhook within %v of the last due time", b.e.k, nc, n, nh, n, b.cfg.timeout)
	}
	r.Consumer, r.Webhook = quantiles(lc), quantiles(lh)
	r.Consumer.Seen, r.Consumer.Dups = nc, dc
	r.Webhook.Seen, r.Webhook.Dups = nh, dh
	say("k=%d lag       consumer (due -> record read): p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms (%d tasks)",
		b.e.k, r.Consumer.P50, r.Consumer.P99, r.Consumer.P999, r.Consumer.Max, nc)
	say("k=%d lag       webhook  (due -> call received): p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms (%d tasks) [%s]",
		b.e.k, r.Webhook.P50, r.Webhook.P99, r.Webhook.P999, r.Webhook.Max, nh, r.Method)
	r.RedisCPU = b.cpuPerTask("lag", c0, c1, n)
	b.commandsPerTask("lag", cs0, cs1, n)
	r.PerTask = perTask(pre, post, n)
	say("k=%d lag       CPU per task, scheduling to the last webhook call (a steady stream: idle work over %v included): %s", b.e.k, b.cfg.lagDur, r.PerTask)
	say("k=%d lag       (at a steady %.0f/s most takes, claims and finishes carry one task or few: the per-call cost is not shared as in the bursts)", b.e.k, b.cfg.lagRate)
}

// warmUp runs a few tasks through both paths (the work processes' group
// joined and assigned, connections made, the leaders' first takes) and
// then reads the masters' idle CPU over idle.
func (b *run) warmUp(n int, idle time.Duration) {
	for _, topic := range []string{burstTopic, tasksTopic} {
		prefix := fmt.Sprintf("k%d-w-%s-", b.e.k, topic)
		w := newWatch(prefix, n)
		t := b.e.consumer
		if topic == tasksTopic {
			t = b.e.hook
		}
		t.cur.Store(w)
		now := time.Now()
		b.schedule(prefix, n, topic, func(int) time.Time { return now })
		ok := w.wait(60 * time.Second)
		t.cur.Store(nil)
		if !ok {
			got, _, _, _, _ := w.snapshot()
			b.e.checkAlive()
			b.e.scope.Fatalf("k=%d warm-up: %d of %d tasks on %s seen within 60s", b.e.k, got, n, topic)
		}
	}
	c0 := b.e.redisCPU()
	time.Sleep(idle)
	c1 := b.e.redisCPU()
	var parts []string
	for i := range c0 {
		pct := 100 * (c1[i] - c0[i]).Seconds() / idle.Seconds()
		b.res.IdleRedisCPUPct = append(b.res.IdleRedisCPUPct, pct)
		parts = append(parts, fmt.Sprintf("m%d %.1f%%", i, pct))
	}
	say("k=%d idle redis CPU over %v (pollers, elections, cluster bus; per master, %% of one core): %s", b.e.k, idle, strings.Join(parts, ", "))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantiles summarises lags in milliseconds.
func quantiles(ds []time.Duration) Lags {
	if len(ds) == 0 {
		return Lags{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p * float64(len(s)-1))
		return ms(s[i])
	}
	return Lags{P50: q(0.5), P99: q(0.99), P999: q(0.999), Max: ms(s[len(s)-1])}
}
