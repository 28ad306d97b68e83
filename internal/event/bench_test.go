package event

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/event/fire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkFire measures the event process on this machine, with a real
// redis-server, the in-process kfake broker and one in-process event
// process leading all 16 shards:
//
//	(a) firing lag at a steady 5,000 tasks/s for 10s: tasks scheduled live
//	    (every 10ms, 50 tasks due 500ms later by Redis' clock, spread over
//	    the 10ms), read while they fire by an independent franz-go consumer
//	    (liveLags) that stamps each fetch as it returns; per task's first
//	    record: take = record timestamp (the fire time, set before the
//	    produce call) - dq-due-at (millisecond resolution), transit =
//	    consumer - record timestamp (the produce call to the broker's ack,
//	    then the fetch), total = consumer - dq-due-at, what a user
//	    measures; the produce call alone from delayq_produce_duration_seconds;
//	(b) drain rate of 200,000 tasks all due at once (scheduled before the
//	    process starts; clock from its first take to the last settle), next
//	    to kafka-go's raw produce rate to the same broker with the same
//	    writer settings, 16 goroutines writing synchronous batches of 500 of
//	    the same records; three rounds of one drain then one raw pass, the
//	    medians compared; then an ideal drain (idealDrain: the least a
//	    sorted-set fire path can do) of as many tasks; each round prints
//	    the CPU per task of Redis and of this process;
//	(c) Redis commands per second of the idle process (16 shards, no
//	    tasks): total_commands_processed over 10s.
//
// Run: go test ./internal/event -run '^$' -bench BenchmarkFire -benchtime 1x
// (DQ_BENCH_PARTS=a,b,c selects parts; DQ_BENCH_DRAIN_PROFILE=<file>
// writes a CPU profile of the drain; DQ_BENCH_WORKED=1 declares the topics
// worked: receipts only, not delivered; see benchWorked).
func BenchmarkFire(b *testing.B) {
	parts := os.Getenv("DQ_BENCH_PARTS")
	if parts == "" {
		parts = "a,b,c"
	}
	load, _ := os.ReadFile("/proc/loadavg")
	bt := DefaultConfig().KafkaBatchWait.String()
	if v := os.Getenv("DQ_BENCH_BATCH_TIMEOUT"); v != "" {
		bt = v + " (DQ_BENCH_BATCH_TIMEOUT)"
	}
	say(b, "kafka-go BatchTimeout %s", bt)
	say(b, "fire path: %s", benchFirePath())
	say(b, "machine: %d CPUs, GOMAXPROCS %d, load average %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), strings.TrimSpace(string(load)))
	for range b.N {
		if strings.Contains(parts, "a") {
			benchSteady(b)
		}
		if strings.Contains(parts, "b") {
			benchBurst(b)
		}
		if strings.Contains(parts, "c") {
			benchIdle(b)
		}
	}
}

// benchConfig is the app configuration of a benchmark; DQ_BENCH_BATCH_TIMEOUT
// overrides kafka-go's BatchTimeout to compare settings.
func benchConfig(w *world, id string) Config {
	cfg := w.config(id)
	if v := os.Getenv("DQ_BENCH_BATCH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			w.t.Fatal(err)
		}
		cfg.KafkaBatchWait = d
	}
	return cfg
}

func benchSteady(b *testing.B) {
	const (
		rate     = 5000
		duration = 10 * time.Second
		tick     = 10 * time.Millisecond
		perTick  = rate * int(tick) / int(time.Second)
		ahead    = 500 * time.Millisecond
	)
	w := newWorld(b, 16)
	benchDeclare(b, w, task.DefaultTopic)
	a := w.startAppConfig(benchConfig(w, "bench-steady"))
	w.waitBalanced(15*time.Second, a)
	live := startLiveLags(b, w, task.DefaultTopic)

	ctx := b.Context()
	payload := []byte(strings.Repeat("x", 100))
	cpu0 := testenv.RedisCPU(b, w.store.Client())
	_, sc0 := commandStats(b, w.store.Client())
	ticker := time.NewTicker(tick)
	start := time.Now()
	var n int
	var lateTicks int
	for time.Since(start) < duration {
		<-ticker.C
		subs := make([]redisstore.Submit, perTick)
		for i := range subs {
			subs[i] = redisstore.Submit{
				Task:     &task.Task{ID: "steady-" + strconv.Itoa(n), Type: "bench", Payload: payload, DueAt: time.Now()},
				Delay:    ahead + time.Duration(i)*tick/time.Duration(perTick),
				Relative: true,
			}
			n++
		}
		t0 := time.Now()
		if _, err := w.store.Schedule(ctx, subs); err != nil {
			b.Fatal(err)
		}
		if time.Since(t0) > tick {
			lateTicks++
		}
	}
	ticker.Stop()
	scheduled := time.Since(start)
	redisBusy := testenv.RedisCPU(b, w.store.Client()) - cpu0
	_, sc1 := commandStats(b, w.store.Client())
	lv := live.wait(b, n, 30*time.Second)
	lags := lv.take
	p50, p99, mx := quantiles(lags)
	var over5 int
	for _, l := range lags {
		if l > 5*time.Millisecond {
			over5++
		}
	}
	say(b, "(a) steady: %d tasks scheduled at %.0f tasks/s over %v (%d ticks with a schedule call slower than the tick); 1 event process, 16 shards",
		n, float64(n)/scheduled.Seconds(), scheduled.Round(time.Millisecond), lateTicks)
	say(b, "(a) consumed %d of %d tasks (duplicate copies %d, fired early %d) with an independent franz-go consumer", len(lv.total), n, lv.dups, lv.early)
	say(b, "(a) take     due -> record ts       %s", testenv.LagDist(lv.take))
	say(b, "(a) produce  the produce call     %s (delayq_produce_duration_seconds: the bucket that holds each quantile)", histQuantiles(b, a.Addr(), "delayq_produce_duration_seconds"))
	say(b, "(a) transit  record ts -> consumer %s", testenv.LagDist(lv.transit))
	say(b, "(a) TOTAL    due -> consumer       %s", testenv.LagDist(lv.total))
	say(b, "(a) firing lag at the Kafka record timestamp (the take): p50=%v p99=%v max=%v; %.2f%% over 5ms (target p99 <= 5ms)",
		p50, p99, mx, 100*float64(over5)/float64(len(lags)))
	say(b, "(a) take distribution: %s", lagHistogram(lags))
	say(b, "(a) redis-server CPU: %v in %v (%.0f%% of one core, scheduling included)", redisBusy.Round(time.Millisecond), scheduled.Round(time.Millisecond), 100*redisBusy.Seconds()/scheduled.Seconds())
	say(b, "(a) redis by command: %s", commandDelta(sc0, sc1))
	say(b, "(a) takes with tasks %v, mean batch %.1f, mean produce %.2fms",
		metric(b, a.Addr(), "delayq_fire_batch_size_count"),
		metric(b, a.Addr(), "delayq_fire_batch_size_sum")/max(1, metric(b, a.Addr(), "delayq_fire_batch_size_count")),
		1000*metric(b, a.Addr(), "delayq_produce_duration_seconds_sum")/max(1, metric(b, a.Addr(), "delayq_produce_duration_seconds_count")))
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-lag-ms")
	b.ReportMetric(float64(testenv.Quantile(lv.total, 0.99).Microseconds())/1000, "p99-consumer-lag-ms")
	a.stop(b)
}

// liveLags is an independent franz-go consumer of a topic that reads the
// records while they are fired (testenv.StampPolls: each fetch stamped as
// PollFetches returns; FetchMaxWait 10ms is franz-go's minimum and adds
// nothing: kfake answers a waiting fetch as soon as a record is appended).
type liveLags struct{ polls *testenv.Polls }

// lagParts is what liveLags measured, per task's first record.
type lagParts struct {
	take, transit, total []time.Duration
	dups, early          int
}

func startLiveLags(tb testing.TB, w *world, topic string) *liveLags {
	cl := w.kafka.Client(tb, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond), kgo.FetchMinBytes(1))
	return &liveLags{polls: testenv.StampPolls(cl)}
}

// wait collects the records until n distinct tasks were seen (or fails
// when nothing came for idle), then stops the consumer.
func (l *liveLags) wait(tb testing.TB, n int, idle time.Duration) lagParts {
	defer l.polls.Stop()
	var p lagParts
	seen := make(map[string]bool, n)
	t := time.NewTimer(idle)
	defer t.Stop()
	for len(seen) < n {
		select {
		case batch := <-l.polls.C:
			t.Reset(idle)
			for _, s := range batch {
				id := hdr(s.R, record.HeaderID)
				if seen[id] {
					p.dups++
					continue
				}
				seen[id] = true
				due := time.UnixMilli(hdrInt(s.R, record.HeaderDueAt))
				if s.R.Timestamp.Before(due) {
					p.early++
				}
				p.take = append(p.take, s.R.Timestamp.Sub(due))
				p.transit = append(p.transit, s.At.Sub(s.R.Timestamp))
				p.total = append(p.total, s.At.Sub(due))
			}
		case <-t.C:
			tb.Fatalf("the consumer saw %d of %d tasks; nothing more for %v", len(seen), n, idle)
		}
	}
	return p
}

// histQuantiles reads histogram name from an app's /metrics and names the
// bucket upper bound that holds its p50, p99 and p99.9.
func histQuantiles(tb testing.TB, addr, name string) string {
	tb.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	hs := map[string]testenv.Hist{}
	if err := testenv.AddHists(hs, string(body)); err != nil {
		tb.Fatal(err)
	}
	return hs[name].Summary()
}

func benchBurst(b *testing.B) {
	const n, rounds = 200000, 3
	w := newWorld(b, 16)
	ctx := b.Context()
	payload := []byte(strings.Repeat("x", 100))

	// Raw kafka-go: the same writer settings, the same records, 16
	// goroutines writing synchronous batches of 500 (what the 16 pollers
	// do). Every drain and every raw pass writes to a topic of its own
	// with 4 partitions: kfake's cost per record grows with a partition's
	// in-memory log, so neither may inherit a longer one.
	cfg := benchConfig(w, "raw")
	p := fire.NewKafka(fire.KafkaConfig{Brokers: w.kafka.Brokers, BatchSize: cfg.FireBatch, BatchTimeout: cfg.KafkaBatchWait, WriteTimeout: cfg.KafkaTimeout})
	defer func() { _ = p.Close() }()
	msgs := make([]kafka.Message, n)
	now := time.Now()
	for i := range msgs {
		tk := &task.Task{ID: "burst-0-" + strconv.Itoa(i), Type: "bench", Payload: payload, DueAt: now, Gen: 0, Attempt: 1}
		msgs[i] = record.Encode(tk, "bench.raw", now)
	}
	// (all topics are created before the writer's first metadata request:
	// kafka-go's cached metadata would not know a later one for 10s)
	for r := range rounds {
		w.kafka.CreateTopic(b, "bench.raw."+strconv.Itoa(r), 4)
		w.kafka.CreateTopic(b, "bench.drain."+strconv.Itoa(r), 4)
	}
	w.kafka.CreateTopic(b, "bench.raw.one", 4)
	w.kafka.CreateTopic(b, "bench.ideal", 4)
	w.kafka.CreateTopic(b, record.DefaultOutcomesTopic, 4) // the delivered outcome records
	// rawRate returns records/s and the CPU of this process per record
	// (kafka-go and kfake: what the broker and client cost in both runs).
	rawRate := func(workers int, topic string) (float64, time.Duration) {
		for i := range msgs {
			msgs[i].Topic = topic
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Int64
		pcpu0 := testenv.ProcessCPU()
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(500)) - 500
					if i >= n {
						return
					}
					for _, err := range p.Produce(ctx, msgs[i:min(i+500, n)]) {
						if err != nil {
							failed.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("raw produce: %d failed", failed.Load())
		}
		return float64(n) / time.Since(start).Seconds(), (testenv.ProcessCPU() - pcpu0) / n
	}

	// The machine's speed drifts by a third within a minute (the raw rate
	// of one pass went from 180k to 400k records/s between passes), so
	// drain and raw take turns: rounds of one drain then one raw pass, and
	// the target compares the medians.
	var drains, raws, cores []float64
	for r := range rounds {
		tasks := make([]*task.Task, n)
		due := time.Now().Truncate(time.Millisecond)
		for i := range tasks {
			tasks[i] = &task.Task{ID: "burst-" + strconv.Itoa(r) + "-" + strconv.Itoa(i), Type: "bench", Payload: payload, DueAt: due}
		}
		t0 := time.Now()
		w.schedule(tasks)
		scheduled := time.Since(t0)

		cpu0 := testenv.RedisCPU(b, w.store.Client())
		_, bc0 := commandStats(b, w.store.Client())
		stopProfile := func() {}
		if r == 0 {
			stopProfile = profileDrain(b)
		}
		var first, pcpu0 atomic.Int64 // the first take: when, and this process' CPU then
		hooks := &pollerHooks{BeforeTake: func(int, int64) {
			if first.CompareAndSwap(0, time.Now().UnixNano()) {
				pcpu0.Store(int64(testenv.ProcessCPU()))
			}
		}}
		acfg := benchConfig(w, "bench-burst-"+strconv.Itoa(r))
		acfg.DefaultTopic = "bench.drain." + strconv.Itoa(r)
		benchDeclare(b, w, acfg.DefaultTopic)
		a := w.startAppConfig(acfg, withPollerHooks(hooks))
		var end time.Time
		if !pollEvery(300*time.Second, 5*time.Millisecond, func() bool {
			if counterValue(a.fm.Fired) >= n {
				end = time.Now()
				return true
			}
			return false
		}) {
			b.Fatalf("burst not drained: %v fired", metric(b, a.Addr(), "delayq_fired_total"))
		}
		stopProfile()
		drain := end.Sub(time.Unix(0, first.Load()))
		redisBusy, procBusy := testenv.RedisCPU(b, w.store.Client())-cpu0, testenv.ProcessCPU()-time.Duration(pcpu0.Load())
		_, bc1 := commandStats(b, w.store.Client())
		drainRate := float64(n) / drain.Seconds()
		batches := metric(b, a.Addr(), "delayq_fire_batch_size_count")
		rc, dl, op, od := benchSettled(b, a)
		a.stop(b)
		raw, rawCPU := rawRate(16, "bench.raw."+strconv.Itoa(r))
		drains, raws = append(drains, drainRate), append(raws, raw)
		drainCPU := (redisBusy + procBusy) / n
		cores = append(cores, raw/2*drainCPU.Seconds())

		say(b, "(b) round %d: scheduled %d tasks (all due at once) in %v; drain %v = %.0f tasks/s (%v takes, mean batch %.0f); redis-server CPU %v (%.0f%% of one core); raw kafka-go right after: %.0f records/s; drain = %.0f%% of raw",
			r+1, n, scheduled.Round(time.Millisecond), drain.Round(time.Millisecond), drainRate, batches, float64(n)/max(batches, 1),
			redisBusy.Round(time.Millisecond), 100*redisBusy.Seconds()/drain.Seconds(), raw, 100*drainRate/raw)
		say(b, "(b) round %d, CPU per task: drain %.2fus (redis-server %.2f + this process %.2f: event process, kafka-go, kfake), raw %.2fus per record (kafka-go, kfake); 50%% of raw (%.0f tasks/s) would need %.1f cores at the drain's cost (this machine: %d)",
			r+1, us(drainCPU), us(redisBusy/n), us(procBusy/n), us(rawCPU), raw/2, cores[r], runtime.NumCPU())
		say(b, "(b) round %d, settles at the drain's end: %.0f receipts, %.0f delivered; outcome records %.0f published, %.0f dropped", r+1, rc, dl, op, od)
		if r == 0 {
			say(b, "(b) round 1, redis by command: %s", commandDelta(bc0, bc1))
		}
	}
	raw1, _ := rawRate(1, "bench.raw.one")
	ideal, idealRedis, idealProc := idealDrain(b, w, p, n, payload, "bench.ideal")
	slices.Sort(drains)
	slices.Sort(raws)
	drainRate, raw16 := drains[rounds/2], raws[rounds/2]
	say(b, "(b) drain, median of %d rounds: %.0f tasks/s (%.0f..%.0f)", rounds, drainRate, drains[0], drains[rounds-1])
	say(b, "(b) raw kafka-go to the same broker, same writer settings and records, 16 writers of 500-record batches, median of %d passes: %.0f records/s (%.0f..%.0f); one writer: %.0f", rounds, raw16, raws[0], raws[rounds-1], raw1)
	slices.Sort(cores)
	say(b, "(b) drain rate = %.0f%% of the raw 16-writer rate (target >= 50%%); cores 50%% of raw would need at the drain's CPU per task, median: %.1f", 100*drainRate/raw16, cores[rounds/2])
	say(b, "(b) ideal drain (records inside the due sets, a take = ZRANGE + ZREMRANGEBYRANK, nothing else; 16 shards, same writer): %.0f tasks/s = %.0f%% of raw; CPU per task redis-server %.2fus, this process %.2fus",
		ideal, 100*ideal/raw16, us(idealRedis), us(idealProc))
	b.ReportMetric(drainRate, "drain-tasks/s")
	b.ReportMetric(raw16, "raw-records/s")
}

// idealDrain is the least a fire path that keeps tasks in Redis sorted sets
// can do: each of 16 shards' due set holds the whole record as its member
// ("<id>\x00<due ms: 8 bytes><task body>"), a take is one script of ZRANGE
// BYSCORE LIMIT 500 + ZREMRANGEBYRANK with Redis' clock, and the records go
// to Kafka through the same writer, one synchronous batch per take, with
// no lease, no fence, no settle and no record left to answer GET or cancel
// by id: an upper bound for any design, not a poller. It returns tasks/s
// and redis-server and process CPU per task.
func idealDrain(b *testing.B, w *world, p *fire.Kafka, n int, payload []byte, topic string) (float64, time.Duration, time.Duration) {
	const shards, batch = 16, 500
	rdb := w.store.Client()
	ctx := b.Context()
	key := func(sh int) string { return fmt.Sprintf("bench:ideal:{%d}:due", sh) }
	due := time.Now().Add(-time.Second)
	body := task.EncodeBody(&task.Task{Type: "bench", Payload: payload})
	pipe := rdb.Pipeline()
	for i := range n {
		id := "ideal-" + strconv.Itoa(i)
		m := make([]byte, 0, len(id)+9+len(body))
		m = append(append(append(m, id...), 0), make([]byte, 8)...)
		binary.BigEndian.PutUint64(m[len(id)+1:], uint64(task.Millis(due)))
		m = append(m, body...)
		pipe.ZAdd(ctx, key(redisstore.ShardOf(id, shards)), redis.Z{Score: float64(task.Millis(due)), Member: m})
		if pipe.Len() == 1000 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	take := redis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
if #m > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #m - 1) end
return m`)
	cpu0, pcpu0 := testenv.RedisCPU(b, rdb), testenv.ProcessCPU()
	start := time.Now()
	var wg sync.WaitGroup
	var fired atomic.Int64
	for sh := range shards {
		wg.Go(func() {
			for {
				ms, err := take.Run(ctx, rdb, []string{key(sh)}, batch).StringSlice()
				if err != nil {
					b.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				now := time.Now()
				msgs := make([]kafka.Message, len(ms))
				for i, m := range ms {
					id, rest, _ := strings.Cut(m, "\x00")
					t := &task.Task{ID: id, DueAt: task.FromMillis(int64(binary.BigEndian.Uint64([]byte(rest[:8])))), Attempt: 1}
					if err := task.DecodeBodyOwned([]byte(rest[8:]), t); err != nil {
						b.Error(err)
						return
					}
					msgs[i] = record.Encode(t, topic, now)
				}
				for _, err := range p.Produce(ctx, msgs) {
					if err != nil {
						b.Error(err)
						return
					}
				}
				fired.Add(int64(len(ms)))
			}
		})
	}
	wg.Wait()
	if fired.Load() != int64(n) {
		b.Fatalf("ideal drain fired %d of %d", fired.Load(), n)
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, (testenv.RedisCPU(b, rdb) - cpu0) / time.Duration(n), (testenv.ProcessCPU() - pcpu0) / time.Duration(n)
}

// us is d in microseconds.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// profileDrain writes a CPU profile of this process (event process, kfake)
// during the drain to $DQ_BENCH_DRAIN_PROFILE, when set.
func profileDrain(b *testing.B) (stop func()) {
	path := os.Getenv("DQ_BENCH_DRAIN_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

func benchIdle(b *testing.B) {
	w := newWorld(b, 16)
	a := w.startAppConfig(benchConfig(w, "bench-idle"))
	w.waitBalanced(15*time.Second, a)
	rdb := w.redis.Client(b)
	settle := time.NewTimer(2 * time.Second) // let campaigns and adopts pass
	<-settle.C
	const window = 10 * time.Second
	t0, c0 := commandStats(b, rdb)
	timer := time.NewTimer(window)
	<-timer.C
	t1, c1 := commandStats(b, rdb)
	total := t1 - t0 - 1 // minus our first INFO
	var parts []string
	for name, v := range c1 {
		if d := v.Calls - c0[name].Calls; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, d))
		}
	}
	perSec := float64(total) / window.Seconds()
	say(b, "(c) idle, 16 shards, 1 process: %d Redis commands in %v = %.1f/s = %.2f per shard per second (target <= 2); by command: %s",
		total, window, perSec, perSec/16, strings.Join(parts, " "))
	b.ReportMetric(perSec/16, "idle-cmds/shard/s")
	a.stop(b)
}

// lagHistogram is the share of lags per millisecond bucket.
func lagHistogram(lags []time.Duration) string {
	edges := []time.Duration{0, 1, 2, 3, 4, 5, 10, 20, 50}
	counts := make([]int, len(edges)+1)
	for _, l := range lags {
		i, _ := slices.BinarySearch(edges, l/time.Millisecond) // first edge >= l
		counts[i]++
	}
	var parts []string
	for i, c := range counts {
		label := fmt.Sprintf("<=%dms", edges[min(i, len(edges)-1)])
		if i == len(edges) {
			label = fmt.Sprintf(">%dms", edges[len(edges)-1])
		}
		parts = append(parts, fmt.Sprintf("%s %.2f%%", label, 100*float64(c)/float64(max(len(lags), 1))))
	}
	return strings.Join(parts, ", ")
}

// commandStats reads INFO stats and commandstats: total commands processed,
// and calls and microseconds per command.
func commandStats(tb testing.TB, rdb interface {
	Info(context.Context, ...string) *redis.StringCmd
}) (int64, map[string]testenv.CommandStat) {
	info, err := rdb.Info(tb.Context(), "stats", "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			total, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return total, testenv.ParseCommandStats(info)
}

// commandDelta formats calls and time per command between two reads,
// busiest first.
func commandDelta(before, after map[string]testenv.CommandStat) string {
	type row struct {
		name        string
		calls, usec int64
	}
	var rows []row
	for name, a := range after {
		if d := a.Calls - before[name].Calls; d > 0 {
			rows = append(rows, row{name, d, a.Usec - before[name].Usec})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.usec, a.usec) })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d calls %.1fus/call", r.name, r.calls, float64(r.usec)/float64(r.calls)))
	}
	return strings.Join(parts, ", ")
}

func pollEvery(timeout, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.Counter.GetValue()
}
